/**
 * Write Steward reconciler plugins in TypeScript: one {@link Kind} per kind, {@link definePlugin}
 * to name them, and `steward-ts build` to make a WebAssembly component of them.
 *
 * The SDK is the TypeScript twin of the Rust crate `steward-sdk`: it parses the spec (against
 * the kind's JSON schema, see `schema.ts`), runs `validate` before `reconcile`, keeps the last
 * status when an outcome sets none, and turns the kind's answers into the `steward:plugin` WIT
 * contract's records. The WIT types come from `jco guest-types` (run by `steward-ts build`).
 */

import type * as Wit from 'steward:plugin/types@0.1.0';
import type * as ServicesWit from 'steward:plugin/services@0.1.0';
import type * as ToolsWit from 'steward:plugin/tools@0.1.0';
import type * as ChildrenWit from 'steward:plugin/children@0.1.0';
import type * as ColumnsWit from 'steward:plugin/columns@0.1.0';
import * as host from 'steward:plugin/host@0.1.0';
import * as granted from 'steward-plugin-sdk/capabilities';
import { type JsonSchema, SpecError, parseSpec } from './schema';

export { type JsonSchema, SpecError, parseSpec, readValue } from './schema';

/** The WIT package version this SDK speaks; the host refuses plugins of another. */
export const WIT_VERSION = '0.1.0';

export type Resource = Wit.Resource;
export type KeyValue = Wit.KeyValue;
export type ObjectRef = Wit.ObjectRef;
export type Condition = Wit.Condition;
export type ConditionStatus = Wit.ConditionStatus;
export type FieldError = Wit.FieldError;
export type LogLevel = Wit.LogLevel;
export type Transport = Wit.Transport;
export type ServiceSpec = Wit.ServiceSpec;
export type ServicePhase = Wit.ServicePhase;
export type ServiceStatus = Wit.ServiceStatus;
export type ToolInfo = Wit.ToolInfo;
export type Event = Wit.Event;
export type EventType = Wit.EventType;
export type KindInfo = Wit.KindInfo;
export type PluginInfo = Wit.PluginInfo;
export type Request = Wit.Request;
export type Response = Wit.Response;
export type ReconcileError = Wit.ReconcileError;
export type SecretValue = ServicesWit.SecretValue;
export type SecretSource = ServicesWit.SecretSource;
export type SecretTarget = ServicesWit.SecretTarget;
export type DesiredService = ServicesWit.DesiredService;
export type CallRequest = ToolsWit.CallRequest;
export type CallRecord = ToolsWit.CallRecord;
export type CallState = ToolsWit.CallState;
export type Child = ChildrenWit.Child;
export type ObservedChild = ChildrenWit.ObservedChild;
export type PrinterColumn = ColumnsWit.PrinterColumn;
export type ColumnType = ColumnsWit.ColumnType;
export type KindColumns = ColumnsWit.KindColumns;

/** A capability beyond the base contract, as the host config grants it. */
export type Capability = 'services' | 'tools' | 'children';

/** One object of a kind, with its spec read and its last status parsed. */
export interface KindObject<Spec, Status> {
  /** `group/version`. */
  apiVersion: string;
  /** The kind. */
  kind: string;
  /** `metadata.name`. */
  name: string;
  /** `metadata.namespace` (`default` when the source gave none). */
  namespace: string;
  /** Bumped each time the spec's content changes. */
  generation: bigint;
  /** `metadata.labels`. */
  labels: Record<string, string>;
  /** `metadata.annotations`. */
  annotations: Record<string, string>;
  /** The spec, read against the kind's schema. */
  spec: Spec;
  /** The status the plugin last reported; undefined before the first success or when it is not JSON. */
  status: Status | undefined;
  /** True while the host calls `finalize`. */
  deleting: boolean;
}

/** Why a reconcile did not succeed; throw one from a kind's method (or use {@link retry}, {@link fatal}, {@link invalid}). */
export class ReconcileFailure extends Error {
  /** The variant the host receives (`tag`/`val`, as the WIT bindings want it). */
  readonly tag: Wit.ReconcileError['tag'];
  /** The variant's payload. */
  readonly val: string | FieldError[];
  /** The WIT error this failure becomes. */
  readonly payload: ReconcileError;

  constructor(payload: ReconcileError) {
    super(
      payload.tag === 'invalid'
        ? `invalid: ${payload.val.map((e) => `${e.path}: ${e.message}`).join('; ')}`
        : `${payload.tag}: ${payload.val}`,
    );
    this.payload = payload;
    this.tag = payload.tag;
    this.val = payload.val;
  }
}

/** A transient error: the host retries with exponential backoff. */
export function retry(message: string): ReconcileFailure {
  return new ReconcileFailure({ tag: 'retry', val: message });
}

/** A permanent error: Failed until the spec changes or someone triggers a reconcile. */
export function fatal(message: string): ReconcileFailure {
  return new ReconcileFailure({ tag: 'fatal', val: message });
}

/** The spec is wrong: Failed with these field errors until it changes. */
export function invalid(errors: FieldError[]): ReconcileFailure {
  return new ReconcileFailure({ tag: 'invalid', val: errors });
}

/** A field error at `path` (from the object root, for example `spec.steps[2].tool`). */
export function fieldError(path: string, message: string): FieldError {
  return { path, message };
}

/** A condition of type `type`: `true`, `false` or `unknown`. */
export function condition(
  type: string,
  status: boolean | ConditionStatus,
  reason: string,
  message: string,
): Condition {
  const s: ConditionStatus = status === true ? 'true' : status === false ? 'false' : status;
  return { type, status: s, reason, message };
}

/** A printer column (see the WIT's `columns` interface); `priority` 0 shows in every list. */
export function column(name: string, jsonPath: string, type: ColumnType, description = '', priority = 0): PrinterColumn {
  return { name, jsonPath, type, description, priority };
}

/** A stdio service: the host runs `command` with `args` and speaks MCP over its stdin and stdout. */
export function stdioService(
  name: string,
  command: string,
  args: string[] = [],
  opts: { env?: Record<string, string>; workingDir?: string; timeoutMs?: number } = {},
): ServiceSpec {
  return {
    name,
    transport: 'stdio',
    command,
    args,
    env: Object.entries(opts.env ?? {}).map(([key, value]) => ({ key, value })),
    workingDir: opts.workingDir,
    url: undefined,
    headers: [],
    timeoutMs: opts.timeoutMs ?? 10_000,
  };
}

/** A remote service the host connects to at `url` (`streamable-http` or `sse`). */
export function remoteService(
  name: string,
  url: string,
  transport: 'streamable-http' | 'sse' = 'streamable-http',
  opts: { headers?: Record<string, string>; timeoutMs?: number } = {},
): ServiceSpec {
  return {
    name,
    transport,
    command: undefined,
    args: [],
    env: [],
    workingDir: undefined,
    url,
    headers: Object.entries(opts.headers ?? {}).map(([key, value]) => ({ key, value })),
    timeoutMs: opts.timeoutMs ?? 10_000,
  };
}

/** What a successful reconcile wants: status, conditions, owned services, calls, children, when to come back. */
export class Outcome<Status> {
  /** The new status; undefined keeps the last one. */
  status: Status | undefined = undefined;
  /** Conditions to report. */
  conditions: Condition[] = [];
  /** The services the object should own now, with their secrets (capability `services`). */
  services: DesiredService[] = [];
  /** Reconcile again after this many milliseconds, sooner than the resync. */
  requeueAfterMs: number | undefined = undefined;
  /** Events to record. */
  events: Event[] = [];
  /** The tool calls the object wants (capability `tools`): undefined leaves the host's as they are. */
  calls: CallRequest[] | undefined = undefined;
  /** The child objects the object owns (capability `children`): undefined leaves the host's as they are. */
  children: Child[] | undefined = undefined;

  /** Reports `status`, nothing else. */
  static status<S>(status: S): Outcome<S> {
    const o = new Outcome<S>();
    o.status = status;
    return o;
  }

  /** Keeps the last status; nothing else. */
  static keepStatus<S>(): Outcome<S> {
    return new Outcome<S>();
  }

  /** Adds a condition. */
  condition(c: Condition): this {
    this.conditions.push(c);
    return this;
  }

  /** Asks the host to own `spec`, with values read from `secrets` (capability `services`). */
  service(spec: ServiceSpec, secrets: SecretValue[] = []): this {
    this.services.push({ spec, secrets });
    return this;
  }

  /** Sets the tool calls the object wants now (capability `tools`). */
  withCalls(calls: CallRequest[]): this {
    this.calls = calls;
    return this;
  }

  /** Sets the child objects the object owns now (capability `children`). */
  withChildren(children: Child[]): this {
    this.children = children;
    return this;
  }

  /** Asks to be reconciled again after `ms` milliseconds. */
  requeueAfter(ms: number): this {
    this.requeueAfterMs = ms;
    return this;
  }

  /** Records an event. */
  event(type: EventType, reason: string, message: string): this {
    this.events.push({ type, reason, message });
    return this;
  }
}

/** What a kind's methods may ask of the host: reads of its cache, logging, and the granted capabilities. */
export class Context {
  constructor(private readonly requestServices: ServiceStatus[]) {}

  /** Reads one object of the host's cache; undefined when it does not exist. The read is recorded. */
  get(kind: string, namespace: string, name: string): Resource | undefined {
    return host.get({ kind, namespace, name });
  }

  /** Lists `kind` in `namespace`, or in every namespace with undefined. The read is recorded. */
  list(kind: string, namespace?: string): Resource[] {
    return host.list(kind, namespace);
  }

  /** Writes a line to the host's log, attributed to the object. */
  log(level: LogLevel, message: string): void {
    host.log(level, message);
  }

  /** Writes a debug line. */
  debug(message: string): void {
    host.log('debug', message);
  }

  /** Writes an info line. */
  info(message: string): void {
    host.log('info', message);
  }

  /** Writes a warning. */
  warn(message: string): void {
    host.log('warn', message);
  }

  /**
   * What the host observes of the services this object owns. With capability `services` it
   * asks the `services` import (which also says whether a remote server wants authorization)
   * unless the request's copy says all there is; without it, the request's copy (empty
   * unless granted).
   */
  services(): Array<ServiceStatus & { authRequired: boolean }> {
    const says = this.requestServices.every((s) => ['starting', 'running', 'stopped'].includes(s.phase));
    if (!granted.services || says) return this.requestServices.map((s) => ({ ...s, authRequired: false }));
    return granted.services.observed().map((o) => ({ ...o.status, authRequired: o.authRequired }));
  }

  /** The observed state of the owned service called `name`. */
  service(name: string): (ServiceStatus & { authRequired: boolean }) | undefined {
    return this.services().find((s) => s.name === name);
  }

  /** The tool calls the host holds for this object (capability `tools`; empty without it). */
  calls(): CallRecord[] {
    return granted.tools ? granted.tools.calls() : [];
  }

  /** The child objects the host made for this object, as last seen (capability `children`; empty without it). */
  children(): ObservedChild[] {
    return granted.children ? granted.children.observed() : [];
  }
}

/**
 * The logic of one kind, the shape of the Rust SDK's `Kind` trait.
 *
 * The SDK reads the spec against {@link Kind.schema} before any method runs (a spec of the
 * wrong shape is `invalid` with the field's path), and runs `validate` before `reconcile`, so
 * `reconcile` only sees specs that passed it.
 */
export interface Kind<Spec, Status> {
  /** API group, for example `steward.dev`. */
  group: string;
  /** API version, for example `v1alpha1`. */
  version: string;
  /** The kind, CamelCase. */
  kind: string;
  /** Lower-case plural. */
  plural: string;
  /** Whether objects live in namespaces (default true). */
  namespaced?: boolean;
  /** Default resync interval in seconds; 0 (the default) leaves it to the host. */
  resyncSeconds?: number;
  /** The OpenAPI v3 schema of the spec: what `describe` reports and what specs are read against. */
  schema: JsonSchema;
  /** The columns the kind's lists show beyond the host's own. */
  columns?: PrinterColumn[];
  /** Checks the spec beyond its schema; every problem with its path. */
  validate?(obj: KindObject<Spec, Status>): FieldError[];
  /** Problems that do not stop the object (shown as warnings); runs only on specs that read. */
  warnings?(obj: KindObject<Spec, Status>): FieldError[];
  /** Brings the world towards the spec and reports the status; throw a {@link ReconcileFailure} to fail. */
  reconcile(ctx: Context, obj: KindObject<Spec, Status>): Outcome<Status>;
  /** Cleans up before the object is forgotten; by default keeps the last status and owns nothing. */
  finalize?(ctx: Context, obj: KindObject<Spec, Status>): Outcome<Status>;
}

/** A whole plugin: its name (the host config's key), version and kinds. */
export interface PluginDefinition {
  /** Unique plugin name, a DNS-1123 label. */
  name: string;
  /** The plugin's own version (semver). */
  version: string;
  /** Its kinds; distinct. */
  kinds: Kind<any, any>[];
}

/** Declares a plugin; the module's default export is what `steward-ts build` exports. */
export function definePlugin(def: PluginDefinition): PluginDefinition {
  return def;
}

/** Declares one kind with its spec and status types (an identity function that checks the shape). */
export function defineKind<Spec, Status>(kind: Kind<Spec, Status>): Kind<Spec, Status> {
  return kind;
}

function record(kvs: KeyValue[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { key, value } of kvs) out[key] = value;
  return out;
}

function parseStatus<Status>(text: string | undefined): Status | undefined {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as Status;
  } catch {
    return undefined;
  }
}

/** The object of `raw` with its spec read against `kind.schema`; field errors otherwise. */
export function typed<Spec, Status>(kind: Kind<Spec, Status>, raw: Resource): KindObject<Spec, Status> {
  let spec: Spec;
  try {
    spec = parseSpec<Spec>(kind.schema, raw.spec);
  } catch (e) {
    if (e instanceof SpecError) throw invalid([fieldError(e.path, e.detail)]);
    throw e;
  }
  return {
    apiVersion: raw.apiVersion,
    kind: raw.kind,
    name: raw.name,
    namespace: raw.namespace,
    generation: raw.generation,
    labels: record(raw.labels),
    annotations: record(raw.annotations),
    spec,
    status: parseStatus<Status>(raw.status),
    deleting: raw.deleting,
  };
}

type AnyKind = Kind<any, any>;

function kindOf(def: PluginDefinition, name: string): AnyKind {
  const k = def.kinds.find((k) => k.kind === name);
  if (!k) {
    throw fatal(
      `plugin ${def.name} does not reconcile kind ${name} (it has: ${def.kinds.map((k) => k.kind).join(', ')})`,
    );
  }
  return k;
}

/** A thrown value as a failure: a {@link ReconcileFailure} as it is, anything else fatal with its message. */
function asFailure(e: unknown): ReconcileFailure {
  if (e instanceof ReconcileFailure) return e;
  if (e instanceof Error) return fatal(`the plugin threw: ${e.message}`);
  return fatal(`the plugin threw: ${String(e)}`);
}

function respond<Status>(o: Outcome<Status>, raw: Resource): Response {
  if (o.calls !== undefined) {
    if (!granted.tools) throw fatal('the outcome asks for tool calls, which need capability `tools` in package.json\'s steward.capabilities');
    granted.tools.request(o.calls);
  }
  if (o.children !== undefined) {
    if (!granted.children) throw fatal('the outcome sets children, which need capability `children` in package.json\'s steward.capabilities');
    granted.children.desire(o.children);
  }
  let services: ServiceSpec[] = [];
  if (granted.services) {
    granted.services.setDesired(o.services);
  } else {
    const secret = o.services.find((s) => s.secrets.length > 0);
    if (secret) {
      throw fatal(
        `service \`${secret.spec.name}\` reads values from secrets, which only a plugin built with capability \`services\` can ask for; add it to package.json's steward.capabilities`,
      );
    }
    services = o.services.map((s) => s.spec);
  }
  let status: string;
  if (o.status === undefined) {
    status = raw.status ?? '{}';
  } else {
    try {
      status = JSON.stringify(o.status);
    } catch (e) {
      throw fatal(`status does not serialize to JSON: ${(e as Error).message}`);
    }
  }
  return {
    status,
    conditions: o.conditions,
    services,
    requeueAfterMs: o.requeueAfterMs === undefined ? undefined : BigInt(Math.max(0, Math.round(o.requeueAfterMs))),
    events: o.events,
  };
}

function reconcileWith(def: PluginDefinition, request: Request, finalize: boolean): Response {
  try {
    const raw = request.resource;
    const kind = kindOf(def, raw.kind);
    const ctx = new Context(request.services);
    let outcome: Outcome<unknown>;
    if (finalize) {
      // A broken spec must not block deletion: the default finalizer keeps the last status.
      let obj: KindObject<unknown, unknown> | undefined;
      try {
        obj = typed(kind, raw);
      } catch {
        obj = undefined;
      }
      outcome = obj && kind.finalize ? kind.finalize(ctx, obj) : Outcome.keepStatus();
    } else {
      const obj = typed(kind, raw);
      const errs = kind.validate ? kind.validate(obj) : [];
      if (errs.length > 0) throw invalid(errs);
      outcome = kind.reconcile(ctx, obj);
    }
    return respond(outcome, raw);
  } catch (e) {
    throw asFailure(e);
  }
}

function kindInfo(k: AnyKind): KindInfo {
  return {
    group: k.group,
    version: k.version,
    kind: k.kind,
    plural: k.plural,
    namespaced: k.namespaced ?? true,
    specSchema: JSON.stringify(k.schema),
    resyncSeconds: k.resyncSeconds ?? 0,
  };
}

/** The component's exports (`reconciler`, `lint`, `columns`) for `def`; `steward-ts build` exports them. */
export function exportsOf(def: PluginDefinition) {
  const reconciler = {
    describe(): PluginInfo {
      return {
        name: def.name,
        version: def.version,
        kinds: def.kinds.map(kindInfo),
        capabilities: [...granted.capabilities],
      };
    },
    validate(resource: Resource): FieldError[] {
      let kind: AnyKind;
      try {
        kind = kindOf(def, resource.kind);
      } catch (e) {
        return [fieldError('kind', asFailure(e).val as string)];
      }
      try {
        const obj = typed(kind, resource);
        return kind.validate ? kind.validate(obj) : [];
      } catch (e) {
        const f = asFailure(e);
        return f.tag === 'invalid' ? (f.val as FieldError[]) : [fieldError('spec', f.message)];
      }
    },
    reconcile(request: Request): Response {
      return reconcileWith(def, request, false);
    },
    finalize(request: Request): Response {
      return reconcileWith(def, request, true);
    },
  };
  const lint = {
    warnings(resource: Resource): FieldError[] {
      const kind = def.kinds.find((k) => k.kind === resource.kind);
      if (!kind?.warnings) return [];
      try {
        return kind.warnings(typed(kind, resource));
      } catch {
        return [];
      }
    },
  };
  const columns = {
    printerColumns(): KindColumns[] {
      return def.kinds
        .filter((k) => (k.columns ?? []).length > 0)
        .map((k) => ({ kind: k.kind, columns: k.columns ?? [] }));
    },
  };
  return { reconciler, lint, columns };
}
