/**
 * The `mcpservergroup-ts` Steward plugin: kind `MCPServerGroup`, written in TypeScript.
 *
 * A group selects the MCPServers of its namespace by labels and reports which of them are
 * ready and which tools they offer together. It is the same kind as the Rust plugin
 * `plugins/mcpservergroup` and the Python one `examples/plugins/mcpservergroup-py`, answer for
 * answer. Build it with `steward-ts build` (see README.md).
 */

import {
  type Condition,
  type FieldError,
  type JsonSchema,
  type Resource,
  Outcome,
  condition,
  defineKind,
  definePlugin,
  fieldError,
} from 'steward-plugin-sdk';

const OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist'] as const;
const READY_STATES = ['Running', 'Connected'];
const MEMBER_KIND = 'MCPServer';

/** One `matchExpressions` entry. */
interface Requirement {
  key: string;
  operator: (typeof OPERATORS)[number];
  values?: string[];
}

/** The spec of an MCPServerGroup. */
interface Spec {
  selector?: { matchLabels?: Record<string, string>; matchExpressions?: Requirement[] };
  requiredTools?: string[];
}

/** What the group reports of one selected MCPServer. */
interface Member {
  name: string;
  ready: boolean;
  state: string;
  toolCount: number;
}

/** The status of an MCPServerGroup. */
interface Status {
  selected: number;
  ready: number;
  members: Member[];
  tools: string[];
  missingTools: string[];
}

const schema: JsonSchema = {
  type: 'object',
  description:
    'A set of MCPServers of the group\'s namespace, chosen by labels, and the tools they must offer together.',
  properties: {
    selector: {
      type: 'object',
      description: 'Which MCPServers of the namespace belong to the group; absent or empty selects them all.',
      properties: {
        matchLabels: {
          type: 'object',
          description: 'Labels a member must carry, each with exactly this value.',
          additionalProperties: { type: 'string' },
        },
        matchExpressions: {
          type: 'array',
          description: 'Label requirements a member must meet, all of them.',
          items: {
            type: 'object',
            required: ['key', 'operator'],
            properties: {
              key: { type: 'string', description: 'The label key.' },
              operator: {
                type: 'string',
                description:
                  'In and NotIn compare the label\'s value with `values`; Exists and DoesNotExist test the key alone.',
                enum: OPERATORS,
              },
              values: {
                type: 'array',
                description: 'The values of In and NotIn (at least one); empty for Exists and DoesNotExist.',
                items: { type: 'string' },
              },
            },
          },
        },
      },
    },
    requiredTools: {
      type: 'array',
      description: 'Tools that ready members must offer between them for the group to be Ready.',
      items: { type: 'string' },
    },
  },
};

/** The rule violations of a well-typed spec, each at its field's path, in field order. */
function check(spec: Spec): FieldError[] {
  const errs: FieldError[] = [];
  const labels = spec.selector?.matchLabels ?? {};
  if (Object.keys(labels).some((k) => k.trim() === '')) {
    errs.push(fieldError('spec.selector.matchLabels', 'a label key must not be empty'));
  }
  (spec.selector?.matchExpressions ?? []).forEach((e, i) => {
    const at = `spec.selector.matchExpressions[${i}]`;
    const values = e.values ?? [];
    if (e.key.trim() === '') errs.push(fieldError(`${at}.key`, 'the label key must not be empty'));
    if ((e.operator === 'In' || e.operator === 'NotIn') && values.length === 0) {
      errs.push(
        fieldError(
          `${at}.values`,
          `${e.operator} needs at least one value; use Exists or DoesNotExist to test for the key alone`,
        ),
      );
    } else if ((e.operator === 'Exists' || e.operator === 'DoesNotExist') && values.length > 0) {
      errs.push(fieldError(`${at}.values`, `${e.operator} takes no values; use In or NotIn to test the value`));
    }
  });
  const seen = new Set<string>();
  (spec.requiredTools ?? []).forEach((t, i) => {
    if (t.trim() === '') errs.push(fieldError(`spec.requiredTools[${i}]`, 'a tool name must not be empty'));
    else if (seen.has(t)) errs.push(fieldError(`spec.requiredTools[${i}]`, `\`${t}\` is listed twice`));
    seen.add(t);
  });
  return errs;
}

/** Whether an object with `labels` meets every label requirement of the selector. */
function selects(spec: Spec, labels: Map<string, string>): boolean {
  for (const [k, v] of Object.entries(spec.selector?.matchLabels ?? {})) {
    if (labels.get(k) !== v) return false;
  }
  for (const e of spec.selector?.matchExpressions ?? []) {
    const value = labels.get(e.key);
    const values = e.values ?? [];
    if (e.operator === 'In' && (value === undefined || !values.includes(value))) return false;
    if (e.operator === 'NotIn' && value !== undefined && values.includes(value)) return false;
    if (e.operator === 'Exists' && value === undefined) return false;
    if (e.operator === 'DoesNotExist' && value !== undefined) return false;
  }
  return true;
}

/** A server's last status as a member: absent or unparseable status is not ready, state `Unknown`. */
function member(server: Resource): { member: Member; tools: string[] } {
  let status: unknown;
  try {
    status = server.status === undefined ? undefined : JSON.parse(server.status);
  } catch {
    status = undefined;
  }
  if (status === null || typeof status !== 'object' || Array.isArray(status)) {
    return { member: { name: server.name, ready: false, state: 'Unknown', toolCount: 0 }, tools: [] };
  }
  const s = status as Record<string, unknown>;
  const state = typeof s.state === 'string' ? s.state : 'Unknown';
  const ready = READY_STATES.includes(state) && s.health === 'Healthy';
  const tools = Array.isArray(s.tools) ? s.tools.filter((t): t is string => typeof t === 'string') : [];
  return { member: { name: server.name, ready, state, toolCount: ready ? tools.length : 0 }, tools };
}

/** Code-point order, as Rust and Python sort strings. */
function byCodePoint(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The status and the Ready condition of a group over the MCPServers of its namespace. */
export function outcome(spec: Spec, namespace: string, servers: Resource[]): { status: Status; ready: Condition } {
  const chosen = servers
    .filter((s) => selects(spec, new Map(s.labels.map((kv) => [kv.key, kv.value]))))
    .sort((a, b) => byCodePoint(a.name, b.name))
    .map(member);
  const ready = chosen.filter((m) => m.member.ready);
  const tools = [...new Set(ready.flatMap((m) => m.tools))].sort(byCodePoint);
  const offered = new Set(tools);
  const missing = [...new Set((spec.requiredTools ?? []).filter((t) => !offered.has(t)))].sort(byCodePoint);
  const status: Status = {
    selected: chosen.length,
    ready: ready.length,
    members: chosen.map((m) => m.member),
    tools,
    missingTools: missing,
  };
  let cond: Condition;
  if (chosen.length === 0) {
    cond = condition('Ready', false, 'NoServersSelected', `no MCPServer in namespace ${namespace} matches the selector`);
  } else if (ready.length === 0) {
    cond = condition('Ready', false, 'NoServersReady', `none of the ${chosen.length} selected MCPServers is ready`);
  } else if (missing.length > 0) {
    cond = condition('Ready', false, 'ToolsMissing', `no ready member offers: ${missing.join(', ')}`);
  } else {
    cond = condition(
      'Ready',
      true,
      'ServersReady',
      `${ready.length} of ${chosen.length} selected MCPServers are ready, offering ${tools.length} tools`,
    );
  }
  return { status, ready: cond };
}

const MCPServerGroup = defineKind<Spec, Status>({
  group: 'steward.dev',
  version: 'v1alpha1',
  kind: 'MCPServerGroup',
  plural: 'mcpservergroups',
  schema,
  validate: (obj) => check(obj.spec),
  reconcile(ctx, obj) {
    const servers = ctx.list(MEMBER_KIND, obj.namespace);
    const { status, ready } = outcome(obj.spec, obj.namespace, servers);
    ctx.debug(`selected ${status.selected}, ready ${status.ready}`);
    return Outcome.status(status).condition(ready);
  },
  // The group owns nothing: the default finalizer keeps the last status.
});

export default definePlugin({ name: 'mcpservergroup-ts', version: '0.1.0', kinds: [MCPServerGroup] });
