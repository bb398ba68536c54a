// k3s: join the node to a k3s cluster as an agent — the built-in Rust renderer
// (plugins/k3s/src/lib.rs) written again in JavaScript. For the same render context it
// renders the same script, byte for byte, and refuses the same inputs with the same error.
//
// The script writes the agent configuration to /etc/rancher/k3s/config.yaml through a
// quoted here-document (so the shell expands nothing in it), optionally appends the
// kubelet's provider ID at boot, and runs the k3s installer in agent mode.
//
// Parameters (`userDataRenderer.parameters` on the NodeClass):
//   serverURL          k3s server URL; default: the cluster endpoint's scheme and host, with
//                      its port if it has one, else 6443
//   token              the join token, inline (visible to whoever reads the NodeClass)
//   tokenSecret        `secret-name/key` of a secret granted to this renderer (preferred);
//                      exactly one of token and tokenSecret
//   version            INSTALL_K3S_VERSION, e.g. v1.31.4+k3s1; default: the installer's choice
//   installScriptURL   where to fetch the installer; default https://get.k3s.io
//   providerIDCommand  shell command printing the instance ID; with a provider ID prefix it
//                      adds the kubelet arg provider-id=<prefix><id>
//   extraArgs          extra `k3s agent` arguments, separated by spaces (no quoting)

import {
  PROVIDER_ID_COMMAND,
  checkParameterNames,
  fetchInstaller,
  invalidParameter,
  joinToken,
  kubeletArgs,
  nodeTaints,
  nonEmptyParameter,
  parameter,
  parseEndpoint,
  providerIdCommand,
  readInstanceId,
  scriptHeader,
  shellQuote,
  sortedLabels,
  taintSpec,
  yamlEscape,
  yamlQuote,
} from './bootstrap.js';
import { hasWhitespace, splitWhitespace, trim } from './text.js';

const CONFIG_PATH = '/etc/rancher/k3s/config.yaml';
const CONFIG_MARKER = 'JOINERY_K3S_CONFIG';
const DEFAULT_INSTALL_SCRIPT_URL = 'https://get.k3s.io';
const DEFAULT_SERVER_PORT = 6443;

const PARAMETERS = [
  'serverURL',
  'token',
  'tokenSecret',
  'version',
  'installScriptURL',
  PROVIDER_ID_COMMAND,
  'extraArgs',
];

// The join token errors, word for word the Rust renderer's.
const TOKEN_ERRORS = {
  both: 'set only one of the parameters token and tokenSecret',
  neither:
    'the k3s renderer needs a join token: set the parameter tokenSecret to `secret-name/key` ' +
    '(a secret granted to this renderer) or, less safely, token',
  malformed: 'parameter tokenSecret `{reference}` must be `secret-name/key`',
  notGranted:
    'the k3s join token secret `{reference}` (parameter tokenSecret) was not supplied: grant the ' +
    'secret `{name}` to this renderer in the grants file and check that it has the key `{key}`',
};

/** The k3s server URL: the serverURL parameter, or derived from the cluster endpoint. */
export function serverUrl(ctx) {
  const url = nonEmptyParameter(ctx, 'serverURL');
  if (url !== undefined) {
    if (hasWhitespace(url) || !url.includes('://')) {
      throw invalidParameter(`parameter serverURL \`${url}\` is not a URL like https://k3s.example.com:6443`);
    }
    return url;
  }
  const endpoint = trim(ctx.clusterEndpoint);
  if (endpoint === '') {
    throw invalidParameter(
      'no cluster endpoint is known: set the parameter serverURL (e.g. https://k3s.example.com:6443)',
    );
  }
  const parsed = parseEndpoint(endpoint);
  if (parsed === null) {
    throw invalidParameter(
      `cannot derive the k3s server URL from the cluster endpoint \`${endpoint}\`: set the parameter serverURL`,
    );
  }
  return `${parsed.scheme ?? 'https'}://${parsed.host}:${parsed.port ?? DEFAULT_SERVER_PORT}`;
}

/** Renders the join script; throws a `RenderError` for a bad context. `log(level, message)` reaches the host log. */
export function renderScript(ctx, log) {
  // The same checks in the same order as the Rust renderer, so the same error comes first.
  checkParameterNames(ctx, 'k3s', PARAMETERS);
  const server = serverUrl(ctx);
  const token = joinToken(ctx, 'token', 'tokenSecret', TOKEN_ERRORS).value;
  const kubelet = kubeletArgs(ctx, log);
  const installUrl = nonEmptyParameter(ctx, 'installScriptURL') ?? DEFAULT_INSTALL_SCRIPT_URL;
  const version = nonEmptyParameter(ctx, 'version');
  const extraArgs = splitWhitespace(parameter(ctx, 'extraArgs') ?? '');
  const providerIdCmd = providerIdCommand(ctx, 'k3s', log);

  const lines = [scriptHeader(ctx, 'to k3s as an agent'), 'umask 077', 'mkdir -p /etc/rancher/k3s'];

  // The agent configuration: a quoted here-document, so nothing in it is expanded.
  lines.push(`cat > ${CONFIG_PATH} <<'${CONFIG_MARKER}'`);
  lines.push(`server: ${yamlQuote(server)}`);
  lines.push(`token: ${yamlQuote(token)}`);
  lines.push(`node-name: ${yamlQuote(ctx.nodeClaim)}`);
  const labels = sortedLabels(ctx);
  if (labels.length > 0) {
    lines.push('node-label:');
    for (const [key, value] of labels) lines.push(`  - ${yamlQuote(`${key}=${value}`)}`);
  }
  lines.push('node-taint:');
  for (const taint of nodeTaints(ctx)) lines.push(`  - ${yamlQuote(taintSpec(taint))}`);
  // The last key: the provider-ID step below appends to this list at boot.
  if (kubelet.length > 0 || providerIdCmd !== undefined) {
    lines.push('kubelet-arg:');
    for (const arg of kubelet) lines.push(`  - ${yamlQuote(arg)}`);
  }
  lines.push(CONFIG_MARKER);

  if (providerIdCmd !== undefined) {
    lines.push('# The kubelet registers with provider ID <prefix><instance id>.');
    lines.push(readInstanceId(providerIdCmd));
    // The prefix is escaped for YAML now, then quoted for the shell; the ID was checked above.
    const prefix = shellQuote(yamlEscape(ctx.providerIdPrefix));
    lines.push(`printf '  - "provider-id=%s%s"\\n' ${prefix} "$JOINERY_INSTANCE_ID" >> ${CONFIG_PATH}`);
  }

  lines.push(`chmod 600 ${CONFIG_PATH}`);
  lines.push(fetchInstaller(installUrl));
  const run = version === undefined ? [] : [`INSTALL_K3S_VERSION=${shellQuote(version)}`];
  run.push('sh "$JOINERY_INSTALLER" agent', ...extraArgs.map(shellQuote));
  lines.push(run.join(' '));
  return `${lines.join('\n')}\n`;
}
