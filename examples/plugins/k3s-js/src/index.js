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
