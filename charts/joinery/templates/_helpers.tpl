{{/* The chart name, or nameOverride. */}}
{{- define "joinery.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of every object: fullnameOverride, else <release>-<name> (the release name alone when it already contains the name). */}}
{{- define "joinery.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels selecting the controller's pods. */}}
{{- define "joinery.selectorLabels" -}}
app.kubernetes.io/name: {{ include "joinery.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "joinery.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "joinery.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: joinery
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "joinery.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "joinery.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "joinery.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the binary is in the image (the Dockerfile's final stage copies it there). */}}
{{- define "joinery.binary" -}}/usr/local/bin/joinery{{- end }}
{{/* Mount path of the compiled-plugin cache (an emptyDir; the Dockerfile sets the same default). */}}
{{- define "joinery.pluginCacheDir" -}}/var/cache/joinery{{- end }}
{{/* Parent of the plugin directories mounted from ConfigMaps. */}}
{{- define "joinery.pluginRoot" -}}/etc/joinery/plugins{{- end }}
{{/* Directory of the grants file. */}}
{{- define "joinery.grantsDir" -}}/etc/joinery/grants{{- end }}
{{/* Directory of the egress CA bundle. */}}
{{- define "joinery.egressCaDir" -}}/etc/joinery/egress-ca{{- end }}
{{/* Directory of the management cluster's kubeconfig. */}}
{{- define "joinery.managementDir" -}}/etc/joinery/management{{- end }}

{{/* FEATURE_GATES in upstream's `Name=bool,…` form and order. */}}
{{- define "joinery.featureGates" -}}
{{- $g := .Values.settings.featureGates -}}
{{- printf "NodeRepair=%t,ReservedCapacity=%t,SpotToSpotConsolidation=%t,NodeOverlay=%t,StaticCapacity=%t,CapacityBuffer=%t" $g.nodeRepair $g.reservedCapacity $g.spotToSpotConsolidation $g.nodeOverlay $g.staticCapacity $g.capacityBuffer -}}
{{- end }}

{{/*
The secrets granted to plugins, grouped by namespace, as JSON `{namespace: [names]}`: a name
`ns/name` is in ns, a bare name in the release namespace (SYSTEM_NAMESPACE).
*/}}
{{- define "joinery.grantedSecrets" -}}
{{- $byNamespace := dict -}}
{{- range $plugin, $grant := (.Values.grants.plugins | default dict) -}}
{{- range $secret := ($grant.secrets | default list) -}}
{{- $namespace := $.Release.Namespace -}}
{{- $name := $secret -}}
{{- if contains "/" $secret -}}
{{- $parts := splitList "/" $secret -}}
{{- $namespace = first $parts -}}
{{- $name = last $parts -}}
{{- end -}}
{{- $names := get $byNamespace $namespace | default list -}}
{{- $_ := set $byNamespace $namespace (append $names $name | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- toJson $byNamespace -}}
{{- end }}

{{/*
The Kubernetes access granted to plugins on this cluster (`cluster: workload`), as JSON
`{"": [cluster-wide rules], namespace: [rules]}` of RBAC PolicyRules.
*/}}
{{- define "joinery.grantedKubeRules" -}}
{{- $byNamespace := dict -}}
{{- range $plugin, $grant := (.Values.grants.plugins | default dict) -}}
{{- range $rule := ($grant.kubernetes | default list) -}}
{{- if eq (default "workload" $rule.cluster) "workload" -}}
{{- $policy := dict "apiGroups" (list $rule.group) "resources" $rule.resources "verbs" $rule.verbs -}}
{{- range $namespace := (default (list "") $rule.namespaces) -}}
{{- $rules := get $byNamespace $namespace | default list -}}
{{- $_ := set $byNamespace $namespace (append $rules $policy) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $byNamespace -}}
{{- end }}

{{/* Adds the pods' selector to a pod (anti-)affinity term or spread constraint lacking one. */}}
{{- define "joinery.withSelector" -}}
{{- $term := deepCopy .term -}}
{{- if not (hasKey $term "labelSelector") -}}
{{- $_ := set $term "labelSelector" (dict "matchLabels" (include "joinery.selectorLabels" .root | fromYaml)) -}}
{{- end -}}
{{- toYaml $term -}}
{{- end }}

{{/* The plugin settings of the controller and of the compile-plugins init container. */}}
{{- define "joinery.pluginEnv" -}}
- name: JOINERY_GRANTS
  value: {{ printf "%s/grants.yaml" (include "joinery.grantsDir" .) | quote }}
- name: JOINERY_PLUGIN_CACHE_DIR
  value: {{ include "joinery.pluginCacheDir" . | quote }}
{{- with .Values.plugins }}
- name: JOINERY_PLUGIN_DIRS
  value: {{ $dirs := list }}{{ range . }}{{ $dirs = append $dirs (printf "%s/%s" (include "joinery.pluginRoot" $) .configMap) }}{{ end }}{{ join "," $dirs | quote }}
{{- end }}
{{- end }}

{{/* The plugin volumes of the controller and of the compile-plugins init container. */}}
{{- define "joinery.pluginMounts" -}}
- name: plugin-cache
  mountPath: {{ include "joinery.pluginCacheDir" . }}
- name: grants
  mountPath: {{ include "joinery.grantsDir" . }}
  readOnly: true
{{- range $i, $plugin := .Values.plugins }}
# The whole ConfigMap, never a subPath: the kubelet then swaps updates in and the host
# hot-reloads them.
- name: plugin-{{ $i }}
  mountPath: {{ printf "%s/%s" (include "joinery.pluginRoot" $) .configMap }}
  readOnly: true
{{- end }}
{{- end }}
