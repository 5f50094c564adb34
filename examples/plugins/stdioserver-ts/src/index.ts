/**
 * The `stdioserver-ts` Steward plugin: kind `StdioServer` (`example.dev/v1alpha1`), written in
 * TypeScript, which owns a service. Each object asks the host to run one stdio MCP server
 * (`spec.command` with `spec.args` and `spec.env`) and reports what the host observes of it:
 * its phase, process id, restarts and tools, and a `Ready` condition while it runs. Deleting
 * the object stops the process. Needs the capability `services` (granted in the host config).
 */

import {
  type JsonSchema,
  Outcome,
  column,
  condition,
  defineKind,
  definePlugin,
  fieldError,
  stdioService,
} from 'steward-plugin-sdk';

/** The spec of a StdioServer. */
interface Spec {
  command: string;
  args?: string[];
  env?: Record<string, string>;
}

/** The status of a StdioServer. */
interface Status {
  state: string;
  pid?: number;
  restarts: number;
  tools: string[];
  message?: string;
}

const SERVICE = 'server';

const schema: JsonSchema = {
  type: 'object',
  description: 'One MCP server process the host runs and speaks to over stdin and stdout.',
  required: ['command'],
  properties: {
    command: { type: 'string', description: 'The program to run.' },
    args: { type: 'array', description: 'Its arguments.', items: { type: 'string' } },
    env: {
      type: 'object',
      description: 'Extra environment variables of the process.',
      additionalProperties: { type: 'string' },
    },
  },
};

const StdioServer = defineKind<Spec, Status>({
  group: 'example.dev',
  version: 'v1alpha1',
  kind: 'StdioServer',
  plural: 'stdioservers',
  schema,
  columns: [column('State', '.status.state', 'string', 'Where the process stands.')],
  validate(obj) {
    return obj.spec.command.trim() === '' ? [fieldError('spec.command', 'the command must not be empty')] : [];
  },
  reconcile(ctx, obj) {
    const observed = ctx.service(SERVICE);
    const running = observed?.phase === 'running';
    const status: Status = {
      state: observed ? observed.phase[0].toUpperCase() + observed.phase.slice(1) : 'Pending',
      pid: observed?.pid,
      restarts: observed?.restarts ?? 0,
      tools: (observed?.tools ?? []).map((t) => t.name).sort(),
      message: observed?.message,
    };
    const ready = running
      ? condition('Ready', true, 'Running', `the server runs with ${status.tools.length} tools`)
      : condition('Ready', false, observed ? 'NotRunning' : 'Starting', observed?.message ?? 'the server is not running yet');
    return Outcome.status(status)
      .condition(ready)
      .service(stdioService(SERVICE, obj.spec.command, obj.spec.args ?? [], { env: obj.spec.env }));
  },
});

export default definePlugin({ name: 'stdioserver-ts', version: '0.1.0', kinds: [StdioServer] });
