/**
 * Reads a spec's JSON value against the kind's JSON schema, the way the Rust SDK's serde does.
 *
 * A TypeScript type has no shape at run time, so a kind writes its spec's schema once (it is
 * also what `describe` reports) and the SDK reads the spec against it: fields are read in the
 * order they are written and the first wrong type stops the read, with the path of the field;
 * fields the schema does not know are left as they are; an optional field may be left out but
 * not given as `null` (unless its schema says `nullable: true`); a missing required field is
 * reported at its object's path.
 */

/** The subset of OpenAPI v3 / JSON schema the SDK reads specs against (and the host shows). */
export interface JsonSchema {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: JsonSchema | boolean;
  items?: JsonSchema;
  enum?: readonly (string | number | boolean)[];
  nullable?: boolean;
  default?: unknown;
  format?: string;
  minimum?: number;
  maximum?: number;
  [key: string]: unknown;
}

/** A spec that does not have the shape its schema says; `path` is the field's, from the object root. */
export class SpecError extends Error {
  constructor(
    readonly path: string,
    readonly detail: string,
  ) {
    super(`${path}: ${detail}`);
  }
}

/** How serde names the JSON type of a value in its messages. */
function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return `boolean \`${v}\``;
  if (typeof v === 'number') return Number.isInteger(v) ? `integer \`${v}\`` : `floating point \`${v}\``;
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (Array.isArray(v)) return 'a sequence';
  return 'a map';
}

const EXPECTED: Record<string, string> = {
  object: 'a map',
  array: 'a sequence',
  string: 'a string',
  integer: 'an integer',
  number: 'a number',
  boolean: 'a boolean',
};

/**
 * Checks `value` against `schema` and returns it (a shallow copy for objects is not made: the
 * value is the parsed JSON itself). Throws a {@link SpecError} at the first problem.
 */
export function readValue(schema: JsonSchema, value: unknown, path: string): unknown {
  if (value === null && schema.nullable) return value;
  const wrong = (): never => {
    throw new SpecError(path, `invalid type: ${typeName(value)}, expected ${EXPECTED[schema.type ?? ''] ?? 'a value'}`);
  };
  switch (schema.type) {
    case 'object': {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) wrong();
      const obj = value as Record<string, unknown>;
      const props = schema.properties ?? {};
      for (const [key, v] of Object.entries(obj)) {
        const at = `${path}.${key}`;
        const known = Object.prototype.hasOwnProperty.call(props, key) ? props[key] : undefined;
        if (known) readValue(known, v, at);
        else if (typeof schema.additionalProperties === 'object') readValue(schema.additionalProperties, v, at);
      }
      for (const key of schema.required ?? []) {
        if (!Object.prototype.hasOwnProperty.call(obj, key)) throw new SpecError(path, `missing field \`${key}\``);
      }
      break;
    }
    case 'array': {
      if (!Array.isArray(value)) wrong();
      const items = schema.items;
      if (items) (value as unknown[]).forEach((v, i) => readValue(items, v, `${path}[${i}]`));
      break;
    }
    case 'string':
      if (typeof value !== 'string') wrong();
      break;
    case 'integer':
      if (typeof value !== 'number' || !Number.isInteger(value)) wrong();
      break;
    case 'number':
      if (typeof value !== 'number') wrong();
      break;
    case 'boolean':
      if (typeof value !== 'boolean') wrong();
      break;
    default:
      break;
  }
  if (schema.enum && !schema.enum.includes(value as string | number | boolean)) {
    const variants = schema.enum.map((e) => `\`${String(e)}\``).join(', ');
    throw new SpecError(path, `unknown variant \`${String(value)}\`, expected one of ${variants}`);
  }
  return value;
}

/**
 * Parses a spec's JSON text and reads it against `schema`, as the Rust SDK does before any
 * method of a kind runs: a spec that is not a JSON object is an error at `spec`.
 */
export function parseSpec<Spec>(schema: JsonSchema, text: string): Spec {
  const start = text.trimStart()[0];
  if (start !== '{') {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      throw new SpecError('spec', `not JSON: ${(e as Error).message}`);
    }
    const found = Array.isArray(value) ? 'a list' : value === null ? 'null' : `a ${typeof value}`;
    throw new SpecError('spec', `must be a mapping of fields, not ${found}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new SpecError('spec', `not JSON: ${(e as Error).message}`);
  }
  return readValue(schema, value, 'spec') as Spec;
}
