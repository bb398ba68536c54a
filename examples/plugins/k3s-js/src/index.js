// The component's world: `userdata-renderer-plugin` of joinery:plugin@0.1.0 (wit/v0.1).
// It imports the host's `log` (and `config`, which this renderer does not need) and exports
// the `renderer` interface. componentize-js maps the WIT to JavaScript:
//
//   import log:       log(level, message), level one of 'trace' 'debug' 'info' 'warn' 'error'
//   export renderer:  an object with render(context); the context is the WIT record with
//                     camelCase fields. Returning a string is `ok`; throwing
//                     `{ tag: 'invalid-parameter' | 'missing-secret' | 'invalid-template', val }`
//                     is `err(render-error)`.

import { log } from 'joinery:plugin/log@0.1.0';

import { RenderError } from './bootstrap.js';
import { renderScript } from './k3s.js';

export const renderer = {
  render(context) {
    try {
      return renderScript(context, log);
    } catch (e) {
      if (e instanceof RenderError) throw e.toWit();
      // A bug, not a bad input. The component is built without stdio, so nothing would tell
      // the operator what happened: say it in the host log, then let the call trap.
      log('error', `k3s-js renderer failed: ${e && e.stack ? `${e}\n${e.stack}` : e}`);
      throw e;
    }
  },
};

// Warm-up. componentize-js runs this module's top level once at build time and snapshots the
// engine; every call then starts from a fresh copy of that snapshot. The engine compiles a
// function to bytecode, and a regular expression to code, when first used, so without this
// every call would compile again all it uses (a few milliseconds per call). Rendering a few
// contexts here, through every path, puts them in the snapshot compiled. No host import may
// be called at build time, hence the silent logger.
function warmUp() {
  const quiet = () => {};
  const base = {
    nodeClaim: 'warm-up',
    nodePool: 'pool\n',
    labels: [
      { key: 'b', value: 'it\'s "x" \\ \u2028' },
      { key: 'a\ud83d\ude00', value: '' },
    ],
    taints: [
      { key: 't', value: 'v', effect: 'NoSchedule' },
      { key: 't', value: undefined, effect: 'NoSchedule' },
    ],
    startupTaints: [{ key: 's', value: undefined, effect: 'NoExecute' }],
    kubelet:
      '{"maxPods": 110, "podsPerCore": null, "kubeReserved": {"cpu": "100m", "memory": 1.5e-7, "x": 18446744073709551616},' +
      ' "evictionHard": {"memory.available": "5%"}, "cpuCFSQuota": true, "clusterDNS": ["10.43.0.10", -1],' +
      ' "unknown": [{"a": "\\u00e9\\ud83d\\ude00\\n"}, false, 0.5, -0]}',
    clusterName: 'warm-up',
    clusterEndpoint: 'https://[fd00::1]/path',
    providerIdPrefix: 'p://',
    parameters: [
      { key: 'tokenSecret', value: 'join/token' },
      { key: 'version', value: ' v1 ' },
      { key: 'extraArgs', value: '--a=1 \t--b' },
      { key: 'providerIDCommand', value: "echo 'i'" },
    ],
    secrets: [{ key: 'join/token', value: 'K10token\n' }],
    resourceRequests: [],
  };
  const variants = [
    {},
    { parameters: [{ key: 'token', value: 'x' }, { key: 'serverURL', value: 'https://k3s:6443' }], providerIdPrefix: '' },
    { parameters: [{ key: 'bogus', value: 'x' }] },
    { parameters: [{ key: 'token', value: 'x' }, { key: 'tokenSecret', value: 'a/b' }] },
    { parameters: [] },
    { parameters: [{ key: 'tokenSecret', value: 'no-key' }] },
    { secrets: [] },
    { parameters: [{ key: 'serverURL', value: 'no scheme' }] },
    { clusterEndpoint: '' },
    { clusterEndpoint: 'https://k8s:0' },
    { kubelet: '{"maxPods": 1,}' },
    { kubelet: '[1]' },
    { kubelet: '{"maxPods": "x"}' },
    { kubelet: '{"evictionHard": {"a,b": 1}}' },
  ];
  for (let round = 0; round < 3; round++) {
    for (const variant of variants) {
      try {
        renderScript({ ...base, ...variant }, quiet);
      } catch (e) {
        if (!(e instanceof RenderError)) throw e;
      }
    }
  }
}

warmUp();
