// Building blocks of a bootstrap script, as the Rust plugin SDK has them
// (plugins/sdk/src/bootstrap.rs and the render-context helpers of plugins/sdk/src/renderer.rs).
//
// The render context is the one componentize-js hands to `render`: the WIT record with
// camelCase field names (`nodeClaim`, `providerIdPrefix`, …); an `option<string>` is a
// string or `undefined`.

import { CONTROL, hasWhitespace, sortByCodePoints, trim } from './text.js';
import { JsonError, numberText, parseJson } from './json.js';

/** The parameter that names a shell command printing the instance ID. */
export const PROVIDER_ID_COMMAND = 'providerIDCommand';

/** The taint every new node carries until Joinery registers it. */
const REGISTRATION_TAINT = { key: 'karpenter.sh/unregistered', value: undefined, effect: 'NoExecute' };

/**
 * A render error, thrown by the helpers below and returned to the host as the WIT variant
 * `render-error` (`{ tag, val }`).
 */
export class RenderError extends Error {
  constructor(tag, message) {
    super(message);
    this.tag = tag;
  }

  /** The `render-error` value componentize-js passes to the host. */
  toWit() {
    return { tag: this.tag, val: this.message };
  }
}

export const invalidParameter = (message) => new RenderError('invalid-parameter', message);
export const missingSecret = (message) => new RenderError('missing-secret', message);

// ---------------------------------------------------------------------------------------
// The render context
// ---------------------------------------------------------------------------------------

/** The value of `key` in a key/value list; the last one wins when the key is repeated. */
function lookup(list, key) {
  for (let i = list.length - 1; i >= 0; i--) {
    if (list[i].key === key) return list[i].value;
  }
  return undefined;
}

/** A renderer parameter (`userDataRenderer.parameters` on the NodeClass), as given. */
export function parameter(ctx, key) {
  return lookup(ctx.parameters, key);
}

/** A renderer parameter without surrounding whitespace; `undefined` when unset or blank. */
export function nonEmptyParameter(ctx, key) {
  const value = parameter(ctx, key);
  if (value === undefined) return undefined;
  const trimmed = trim(value);
  return trimmed === '' ? undefined : trimmed;
}

/** A granted secret, addressed as `secret-name/key`. */
export function secret(ctx, nameAndKey) {
  return lookup(ctx.secrets, nameAndKey);
}

/** The node's labels as `[key, value]` pairs sorted by key (the last value of a repeated key wins). */
export function sortedLabels(ctx) {
  const labels = new Map();
  for (const { key, value } of ctx.labels) labels.set(key, value);
  return sortByCodePoints([...labels.keys()]).map((key) => [key, labels.get(key)]);
}

/**
 * The taints the node registers with: the taints, then the startup taints, then
 * `karpenter.sh/unregistered:NoExecute` unless a taint already has that key. A taint with
 * the key and effect of an earlier one is dropped (the API server refuses duplicates).
 */
export function nodeTaints(ctx) {
  const taints = [];
  const seen = new Map(); // key → the effects already taken
  for (const taint of [...ctx.taints, ...ctx.startupTaints]) {
    const effects = seen.get(taint.key) ?? new Set();
    if (effects.has(taint.effect)) continue;
    seen.set(taint.key, effects.add(taint.effect));
    taints.push(taint);
  }
  if (!seen.has(REGISTRATION_TAINT.key)) taints.push(REGISTRATION_TAINT);
  return taints;
}

/** A taint as kubelet's `--register-with-taints` and k3s's `--node-taint` write it. */
export function taintSpec(taint) {
  return taint.value == null ? `${taint.key}:${taint.effect}` : `${taint.key}=${taint.value}:${taint.effect}`;
}

// ---------------------------------------------------------------------------------------
// Quoting
// ---------------------------------------------------------------------------------------

/** Single-quotes text for a POSIX shell; an embedded `'` becomes `'\''`. */
export function shellQuote(text) {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

const YAML_QUOTED = /["\\]/g;
const YAML_UNPRINTABLE = new RegExp(`[${CONTROL}\\u2028\\u2029\\ufeff]`, 'g');

/**
 * The inside of a double-quoted YAML scalar: `"` and `\` get a backslash; control
 * characters, U+2028, U+2029 and U+FEFF become `\uXXXX`, so the value stays on one line.
 */
export function yamlEscape(text) {
  // `$&` is the match: a replacement string, not a function, keeps the work native.
  return text
    .replace(YAML_QUOTED, '\\$&')
    .replace(YAML_UNPRINTABLE, (c) => `\\u${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`);
}

/** A double-quoted YAML scalar that cannot end a here-document or change the YAML's shape. */
export function yamlQuote(text) {
  return `"${yamlEscape(text)}"`;
}

const CONTROLS = new RegExp(`[${CONTROL}]`, 'g');

/** Replaces control characters with `?`, so that a name fits on a shell comment line. */
export function commentSafe(text) {
  return text.replace(CONTROLS, '?');
}

// ---------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------

/** Refuses the first parameter whose name the renderer does not know (a typo would go unnoticed). */
export function checkParameterNames(ctx, renderer, accepted) {
  const unknown = ctx.parameters.find((p) => !accepted.includes(p.key));
  if (unknown !== undefined) {
    throw invalidParameter(
      `the ${renderer} renderer has no parameter \`${unknown.key}\`; it accepts: ${accepted.join(', ')}`,
    );
  }
}

/**
 * Replaces each `{name}` of `values` in `template`, in one pass (a value put in is not
 * searched again); any other `{` stays as it is.
 */
function fill(template, values) {
  const [head, ...pieces] = template.split('{');
  let out = head;
  for (const piece of pieces) {
    const hit = Object.entries(values).find(([name]) => piece.startsWith(`${name}}`));
    out += hit === undefined ? `{${piece}` : hit[1] + piece.slice(hit[0].length + 1);
  }
  return out;
}

/**
 * The join token: the parameter `inlineParam` (visible to whoever reads the NodeClass), or
 * the granted secret that the parameter `secretParam` names as `secret-name/key`. Exactly
 * one must be set (a blank one counts as unset); the secret's value is trimmed and may not
 * be blank. `errors` holds the renderer's messages (`both`, `neither`, `malformed`,
 * `notGranted`), in which `{inline}`, `{secret}`, `{reference}`, `{name}` and `{key}` are
 * filled in.
 */
export function joinToken(ctx, inlineParam, secretParam, errors) {
  const say = (template, reference = '', name = '', key = '') =>
    fill(template, { inline: inlineParam, secret: secretParam, reference, name, key });
  const inline = nonEmptyParameter(ctx, inlineParam);
  const reference = nonEmptyParameter(ctx, secretParam);
  if (inline !== undefined && reference !== undefined) throw invalidParameter(say(errors.both));
  if (inline === undefined && reference === undefined) throw invalidParameter(say(errors.neither));
  if (inline !== undefined) return { value: inline, secret: undefined };
  // The key is what follows the last slash.
  const slash = reference.lastIndexOf('/');
  const name = reference.slice(0, Math.max(slash, 0));
  const key = reference.slice(slash + 1);
  if (slash < 0 || name === '' || key === '') throw invalidParameter(say(errors.malformed, reference));
  const value = secret(ctx, reference);
  const token = value === undefined ? '' : trim(value);
  if (token === '') throw missingSecret(say(errors.notGranted, reference, name, key));
  return { value: token, secret: reference };
}

// ---------------------------------------------------------------------------------------
// The cluster endpoint
// ---------------------------------------------------------------------------------------

/** Rust's `u16::from_str` (an optional `+`, ASCII digits), refusing 0; `null` when malformed. */
function parsePort(digits) {
  if (!/^\+?[0-9]+$/.test(digits)) return null;
  const port = Number(digits.replace(/^\+/, ''));
  return port >= 1 && port <= 65535 ? port : null;
}

/**
 * Splits exactly `host` or `host:port` (an IPv6 host in brackets) into `{ host, port }`;
 * `port` is `undefined` when absent. `null` when malformed.
 */
export function parseAuthority(authority) {
  let host;
  let port;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close < 0) return null;
    const rest = authority.slice(close + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) return null;
      port = rest.slice(1);
    }
    host = authority.slice(0, close + 1);
  } else {
    const colon = authority.indexOf(':');
    if (colon < 0) {
      host = authority;
    } else {
      // More than one colon without brackets is not a host and a port.
      port = authority.slice(colon + 1);
      if (port.includes(':')) return null;
      host = authority.slice(0, colon);
    }
  }
  if (port !== undefined) {
    port = parsePort(port);
    if (port === null) return null;
  }
  if (host === '' || host === '[]' || hasWhitespace(host)) return null;
  return { host, port };
}

/**
 * Parses an endpoint such as `https://user@host:6443/path` into `{ scheme, host, port }`
 * (`scheme` and `port` `undefined` when absent): surrounding whitespace, the path, query,
 * fragment and user information are dropped. `null` when no usable host and port are found.
 */
export function parseEndpoint(endpoint) {
  const text = trim(endpoint);
  const separator = text.indexOf('://');
  const scheme = separator < 0 ? undefined : text.slice(0, separator);
  const rest = separator < 0 ? text : text.slice(separator + 3);
  let authority = rest.split(/[/?#]/)[0];
  const at = authority.lastIndexOf('@');
  if (at >= 0) authority = authority.slice(at + 1);
  const parsed = parseAuthority(authority);
  return parsed === null ? null : { scheme, ...parsed };
}

// ---------------------------------------------------------------------------------------
// Kubelet settings
// ---------------------------------------------------------------------------------------

// NodeClass field → kubelet flag, in output order, with how the JSON value becomes text:
// `count` a non-negative integer, `switch` true/false, `pairs` an object written
// `key<separator>value,…` sorted, `list` a list joined with `,`.
const KUBELET_MAPPING = [
  ['maxPods', 'max-pods', { shape: 'count' }],
  ['podsPerCore', 'pods-per-core', { shape: 'count' }],
  ['kubeReserved', 'kube-reserved', { shape: 'pairs', separator: '=' }],
  ['systemReserved', 'system-reserved', { shape: 'pairs', separator: '=' }],
  ['evictionHard', 'eviction-hard', { shape: 'pairs', separator: '<' }],
  ['evictionSoft', 'eviction-soft', { shape: 'pairs', separator: '<' }],
  ['evictionSoftGracePeriod', 'eviction-soft-grace-period', { shape: 'pairs', separator: '=' }],
  ['evictionMaxPodGracePeriod', 'eviction-max-pod-grace-period', { shape: 'count' }],
  ['imageGCHighThresholdPercent', 'image-gc-high-threshold', { shape: 'count' }],
  ['imageGCLowThresholdPercent', 'image-gc-low-threshold', { shape: 'count' }],
  ['cpuCFSQuota', 'cpu-cfs-quota', { shape: 'switch' }],
  ['clusterDNS', 'cluster-dns', { shape: 'list' }],
];

/** What a JSON value is, for error messages. */
function describe(value) {
  switch (value.kind) {
    case 'null':
      return 'null';
    case 'bool':
      return 'a boolean';
    case 'number':
      return value.number === 'unsigned' ? 'an integer' : 'a negative or fractional number';
    case 'string':
      return 'a string';
    case 'array':
      return 'a list';
    default:
      return 'an object';
  }
}

const wrong = (field, expected, value) =>
  invalidParameter(`kubelet.${field} must be ${expected}, not ${describe(value)}`);

/** A scalar inside a map or list: a string or a number, without `,` (the kubelet splits on it). */
function item(field, value) {
  let text;
  if (value.kind === 'string') text = value.value;
  else if (value.kind === 'number') text = numberText(value);
  else throw wrong(field, 'made of strings', value);
  if (text.includes(',')) {
    throw invalidParameter(`kubelet.${field}: \`${text}\` contains a comma, which would split it in two`);
  }
  return text;
}

/** One field's flag value; `undefined` when there is nothing to pass. */
function flagValue(field, { shape, separator }, value) {
  if (value.kind === 'null') return undefined;
  let text;
  switch (shape) {
    case 'count':
      if (value.kind !== 'number' || value.number !== 'unsigned') throw wrong(field, 'a non-negative integer', value);
      text = numberText(value);
      break;
    case 'switch':
      if (value.kind !== 'bool') throw wrong(field, 'true or false', value);
      text = String(value.value);
      break;
    case 'pairs': {
      if (value.kind !== 'object') throw wrong(field, 'an object', value);
      const pairs = [];
      for (const key of sortByCodePoints([...value.entries.keys()])) {
        const name = item(field, { kind: 'string', value: key });
        pairs.push(`${name}${separator}${item(field, value.entries.get(key))}`);
      }
      text = sortByCodePoints(pairs).join(',');
      break;
    }
    default: // list
      if (value.kind !== 'array') throw wrong(field, 'a list', value);
      text = value.items.map((v) => item(field, v)).join(',');
  }
  return text === '' ? undefined : text;
}

/** The NodeClass kubelet settings (a JSON object; `{}` when blank or null) as entries. */
function kubeletSettings(ctx) {
  if (trim(ctx.kubelet) === '') return new Map();
  let settings;
  try {
    settings = parseJson(ctx.kubelet);
  } catch (e) {
    if (e instanceof JsonError) throw invalidParameter(`kubelet settings are not valid JSON: ${e.message}`);
    throw e;
  }
  if (settings.kind === 'null') return new Map();
  if (settings.kind !== 'object') throw invalidParameter('kubelet settings must be a JSON object');
  return settings.entries;
}

/**
 * The kubelet flags for the NodeClass `kubelet` settings as `name=value` arguments (e.g.
 * `max-pods=110`), in the mapping's order. Fields without a flag are logged (warning) and
 * ignored.
 */
export function kubeletArgs(ctx, log) {
  const settings = kubeletSettings(ctx);
  const args = [];
  for (const [field, flag, shape] of KUBELET_MAPPING) {
    if (!settings.has(field)) continue;
    const text = flagValue(field, shape, settings.get(field));
    if (text !== undefined) args.push(`${flag}=${text}`);
  }
  const unmapped = sortByCodePoints(
    [...settings.keys()].filter((key) => !KUBELET_MAPPING.some(([field]) => field === key)),
  );
  if (unmapped.length > 0) {
    log('warn', `kubelet settings without a kubelet flag are ignored by this renderer: ${unmapped.join(', ')}`);
  }
  return args;
}

// ---------------------------------------------------------------------------------------
// Script pieces
// ---------------------------------------------------------------------------------------

/** `#!/bin/sh`, a comment naming the NodeClaim and NodePool and what the script does, `set -eu`. */
export function scriptHeader(ctx, how) {
  return (
    `#!/bin/sh\n# Joinery: join NodeClaim ${commentSafe(ctx.nodeClaim)} (NodePool ${commentSafe(ctx.nodePool)}) ` +
    `${how}. Generated, do not edit.\nset -eu`
  );
}

/**
 * The parameter `providerIDCommand` when the cloud has a provider ID prefix; without a
 * prefix the command is not used, and an info line says so.
 */
export function providerIdCommand(ctx, renderer, log) {
  const command = nonEmptyParameter(ctx, PROVIDER_ID_COMMAND);
  if (command === undefined) return undefined;
  if (ctx.providerIdPrefix === '') {
    log('info', `${renderer} renderer: ${PROVIDER_ID_COMMAND} is not used: the cloud has no provider ID prefix`);
    return undefined;
  }
  return command;
}

/**
 * Shell lines that run `command`, keep its output without whitespace in
 * `$JOINERY_INSTANCE_ID`, and stop when that is empty or has characters outside
 * `A-Z a-z 0-9 . _ : / -` (so it is safe inside a double-quoted YAML string).
 */
export function readInstanceId(command) {
  return [
    `JOINERY_INSTANCE_ID="$(sh -c ${shellQuote(command)} | tr -d '[:space:]')"`,
    'case "$JOINERY_INSTANCE_ID" in',
    "  ''|*[!A-Za-z0-9._:/-]*)",
    `    echo "joinery: ${PROVIDER_ID_COMMAND} printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2`,
    '    exit 1 ;;',
    'esac',
  ].join('\n');
}

/** Shell lines that download `url` into a new temporary file, `$JOINERY_INSTALLER`, with curl or wget. */
export function fetchInstaller(url) {
  const quoted = shellQuote(url);
  return [
    'JOINERY_INSTALLER="$(mktemp)"',
    'if command -v curl >/dev/null 2>&1; then',
    `  curl -sfL ${quoted} -o "$JOINERY_INSTALLER"`,
    'else',
    `  wget -qO "$JOINERY_INSTALLER" ${quoted}`,
    'fi',
  ].join('\n');
}
