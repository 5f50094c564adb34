/**
 * The capability imports a build includes: `steward-ts build` writes this module for each
 * plugin from `steward.capabilities` in its package.json, importing only the granted WIT
 * interfaces (so the component imports only those); an interface left out is undefined here.
 */
declare module 'steward-plugin-sdk/capabilities' {
  /** The capabilities the plugin was built with, as `describe` reports them. */
  export const capabilities: readonly string[];
  /** The `steward:plugin/services` import, when built with capability `services`. */
  export const services:
    | {
        observed(): Array<import('steward:plugin/services@0.1.0').ObservedService>;
        setDesired(services: Array<import('steward:plugin/services@0.1.0').DesiredService>): void;
      }
    | undefined;
  /** The `steward:plugin/tools` import, when built with capability `tools`. */
  export const tools:
    | {
        calls(): Array<import('steward:plugin/tools@0.1.0').CallRecord>;
        request(calls: Array<import('steward:plugin/tools@0.1.0').CallRequest>): void;
      }
    | undefined;
  /** The `steward:plugin/children` import, when built with capability `children`. */
  export const children:
    | {
        observed(): Array<import('steward:plugin/children@0.1.0').ObservedChild>;
        desire(children: Array<import('steward:plugin/children@0.1.0').Child>): void;
      }
    | undefined;
}
