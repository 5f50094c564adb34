#!/usr/bin/env node
// steward-ts: builds a Steward plugin written in TypeScript into a WebAssembly component.
//
//   steward-ts build [PLUGIN_DIR] [-o OUT.wasm] [--work DIR] [--toolchain NODE_MODULES] [--wit DIR]
//   steward-ts types [OUT_DIR] [--toolchain NODE_MODULES] [--wit DIR]
//
// `build` reads PLUGIN_DIR/package.json (`steward.entry`, default `src/index.ts`, whose default
// export is a `definePlugin(...)`; `steward.capabilities`, default none), generates the WIT
// types with jco, type-checks with tsc, bundles with esbuild and componentizes with
// componentize-js into a component that imports the base contract plus exactly the listed
// capabilities, and no WASI at all. `types` writes the jco-generated declarations of the
// whole contract (world `plugin-sdk`) to OUT_DIR (default `types` beside the SDK).

import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync, copyFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const CAPABILITIES = ['services', 'tools', 'children'];
// Everything componentize-js can leave out: a plugin gets no clocks, randomness, stdio or
// network, as the host grants none (it logs through `steward:plugin/host`).
const DISABLED_FEATURES = ['stdio', 'random', 'clocks', 'http', 'fetch-event'];

function fail(msg) {
  process.stderr.write(`steward-ts: ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const opts = { positional: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '-o' || a === '--out') opts.out = value();
    else if (a === '--work') opts.work = value();
    else if (a === '--toolchain') opts.toolchain = value();
    else if (a === '--wit') opts.wit = value();
    else if (a === '-h' || a === '--help') opts.help = true;
    else if (a.startsWith('-')) fail(`unknown option ${a}`);
    else opts.positional.push(a);
  }
  return opts;
}

/** The node_modules directory holding the pinned tools: the option, the environment, or one beside the SDK or above the plugin. */
function toolchain(opt, from) {
  const has = (dir) => existsSync(join(dir, '@bytecodealliance', 'componentize-js', 'package.json'));
  const candidates = [];
  if (opt) candidates.push(resolve(opt));
  if (process.env.STEWARD_TS_TOOLCHAIN) candidates.push(resolve(process.env.STEWARD_TS_TOOLCHAIN));
  candidates.push(join(SDK, 'node_modules'));
  for (let d = resolve(from); ; d = dirname(d)) {
    candidates.push(join(d, 'node_modules'));
    if (dirname(d) === d) break;
  }
  const found = candidates.find(has);
  if (!found) {
    fail(
      `the build tools are not installed: run \`npm ci\` in ${SDK} (or \`npm install\` in the plugin's directory), ` +
        'or point --toolchain (STEWARD_TS_TOOLCHAIN) at a node_modules holding the SDK\'s dependencies',
    );
  }
  return found;
}

/** The directory of the WIT contract: the option, `wit` inside the SDK, or the repository's `wit`. */
function witDir(opt) {
  const found = [opt && resolve(opt), join(SDK, 'wit'), join(SDK, '..', 'wit')].find(
    (d) => d && existsSync(join(d, 'plugin.wit')),
  );
  if (!found) fail('cannot find the WIT contract (plugin.wit); pass --wit DIR');
  return found;
}

function run(tools, script, args, what) {
  const r = spawnSync(process.execPath, [join(tools, script), ...args], { encoding: 'utf8' });
  if (r.error) fail(`${what}: ${r.error.message}`);
  if (r.status !== 0) fail(`${what} failed (exit ${r.status}):\n${r.stdout}${r.stderr}`);
  return r;
}

/** Writes the jco guest types of world `plugin-sdk` (the whole contract) to `out`. */
function guestTypes(tools, wit, out) {
  rmSync(out, { recursive: true, force: true });
  run(
    tools,
    '@bytecodealliance/jco/src/jco.js',
    ['guest-types', wit, '--world-name', 'plugin-sdk', '-o', out, '--quiet'],
    'generating the WIT types with jco',
  );
}

function typesCommand(opts) {
  const tools = toolchain(opts.toolchain, process.cwd());
  const out = resolve(opts.positional[0] ?? join(SDK, 'types'));
  guestTypes(tools, witDir(opts.wit), out);
  process.stdout.write(`${out}\n`);
}

function readPackage(dir) {
  const file = join(dir, 'package.json');
  let pkg;
  try {
    pkg = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    fail(`cannot read ${file}: ${e.message}`);
  }
  const steward = pkg.steward ?? {};
  const caps = steward.capabilities ?? [];
  if (!Array.isArray(caps) || caps.some((c) => !CAPABILITIES.includes(c))) {
    fail(`${file}: steward.capabilities must list some of ${CAPABILITIES.join(', ')}, got ${JSON.stringify(caps)}`);
  }
  const entry = resolve(dir, steward.entry ?? 'src/index.ts');
  if (!existsSync(entry)) fail(`${file}: the entry ${entry} does not exist (steward.entry)`);
  return { name: pkg.name ?? 'plugin', caps, entry };
}

/** The WIT package the component is built against: the contract as a dependency, and a world of the base plus `caps`. */
function buildWit(wit, work, caps) {
  const dir = join(work, 'wit');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'deps', 'steward-plugin'), { recursive: true });
  for (const f of readdirSync(wit).filter((f) => f.endsWith('.wit'))) {
    copyFileSync(join(wit, f), join(dir, 'deps', 'steward-plugin', f));
  }
  // The WASI packages the contract names (a WIT package is parsed whole), beside it.
  const deps = join(wit, 'deps');
  if (existsSync(deps)) {
    for (const f of readdirSync(deps).filter((f) => f.endsWith('.wit'))) {
      copyFileSync(join(deps, f), join(dir, 'deps', f));
    }
  }
  const imports = caps.map((c) => `    import steward:plugin/${c}@0.1.0;\n`).join('');
  writeFileSync(
    join(dir, 'world.wit'),
    '// Written by steward-ts build: the base contract, the capabilities in package.json, the optional exports.\n' +
      'package steward:typescript-plugin;\n\n' +
      'world plugin-ts {\n' +
      '    include steward:plugin/plugin@0.1.0;\n' +
      imports +
      '    export steward:plugin/lint@0.1.0;\n' +
      '    export steward:plugin/columns@0.1.0;\n' +
      '}\n',
  );
  return dir;
}

/** The `steward-plugin-sdk/capabilities` module of this build: the granted imports, undefined for the rest. */
function capabilitiesModule(work, caps) {
  const lines = ['// Written by steward-ts build from steward.capabilities.'];
  const fns = { services: ['observed', 'setDesired'], tools: ['calls', 'request'], children: ['observed', 'desire'] };
  for (const c of CAPABILITIES) {
    if (caps.includes(c)) {
      lines.push(`import * as ${c}Import from 'steward:plugin/${c}@0.1.0';`);
      lines.push(`export const ${c} = { ${fns[c].map((f) => `${f}: ${c}Import.${f}`).join(', ')} };`);
    } else {
      lines.push(`export const ${c} = undefined;`);
    }
  }
  lines.push(`export const capabilities = ${JSON.stringify(caps)};`);
  const file = join(work, 'capabilities.js');
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

function typecheck(tools, work, entry, types) {
  const config = {
    compilerOptions: {
      strict: true,
      noEmit: true,
      target: 'es2022',
      lib: ['es2022'],
      module: 'esnext',
      moduleResolution: 'bundler',
      types: [],
      skipLibCheck: true,
      baseUrl: SDK,
      paths: {
        'steward-plugin-sdk': [join(SDK, 'src', 'index.ts')],
        'steward-plugin-sdk/capabilities': [join(SDK, 'src', 'capabilities.d.ts')],
      },
    },
    files: [join(types, 'plugin-sdk.d.ts'), join(SDK, 'src', 'capabilities.d.ts'), entry],
  };
  const file = join(work, 'tsconfig.json');
  writeFileSync(file, JSON.stringify(config, null, 2));
  run(tools, 'typescript/bin/tsc', ['-p', file, '--pretty', 'false'], 'type-checking with tsc');
}

async function bundle(tools, work, entry, caps) {
  const main = join(work, 'main.js');
  writeFileSync(
    main,
    '// Written by steward-ts build: the plugin\'s exports, as the WIT world names them.\n' +
      `import plugin from ${JSON.stringify(entry)};\n` +
      "import { exportsOf } from 'steward-plugin-sdk';\n" +
      'const exported = exportsOf(plugin);\n' +
      'export const reconciler = exported.reconciler;\n' +
      'export const lint = exported.lint;\n' +
      'export const columns = exported.columns;\n',
  );
  const esbuild = await import(pathToFileURL(join(tools, 'esbuild', 'lib', 'main.js')).href);
  const out = join(work, 'bundle.js');
  try {
    await esbuild.build({
      entryPoints: [main],
      outfile: out,
      bundle: true,
      format: 'esm',
      platform: 'neutral',
      target: 'es2022',
      external: ['steward:*'],
      alias: {
        'steward-plugin-sdk/capabilities': capabilitiesModule(work, caps),
        'steward-plugin-sdk': join(SDK, 'src', 'index.ts'),
      },
      nodePaths: [tools],
      logLevel: 'silent',
    });
  } catch (e) {
    fail(`bundling with esbuild failed:\n${(e.errors ?? []).map((x) => x.text).join('\n') || e.message}`);
  }
  return out;
}

async function buildCommand(opts) {
  const dir = resolve(opts.positional[0] ?? '.');
  const pkg = readPackage(dir);
  const tools = toolchain(opts.toolchain, dir);
  const wit = witDir(opts.wit);
  const work = resolve(opts.work ?? join(dir, '.steward-build'));
  const out = resolve(opts.out ?? join(dir, `${pkg.name.replace(/^@.*\//, '')}.wasm`));
  mkdirSync(work, { recursive: true });
  const types = join(work, 'types');
  guestTypes(tools, wit, types);
  typecheck(tools, work, pkg.entry, types);
  const source = await bundle(tools, work, pkg.entry, pkg.caps);
  const { componentize } = await import(
    pathToFileURL(join(tools, '@bytecodealliance', 'componentize-js', 'src', 'componentize.js')).href
  );
  let built;
  try {
    built = await componentize({
      sourcePath: source,
      witPath: buildWit(wit, work, pkg.caps),
      worldName: 'plugin-ts',
      disableFeatures: DISABLED_FEATURES,
    });
  } catch (e) {
    fail(`componentize-js failed on ${relative(process.cwd(), source)}:\n${e.message ?? e}`);
  }
  mkdirSync(dirname(out), { recursive: true });
  const part = `${out}.${process.pid}.part`;
  writeFileSync(part, built.component);
  renameSync(part, out);
  process.stdout.write(`${out}\n`);
}

const [command, ...rest] = process.argv.slice(2);
const opts = parseArgs(rest);
if (opts.help || !command) {
  process.stdout.write(
    'usage: steward-ts build [PLUGIN_DIR] [-o OUT.wasm] [--work DIR] [--toolchain NODE_MODULES] [--wit DIR]\n' +
      '       steward-ts types [OUT_DIR] [--toolchain NODE_MODULES] [--wit DIR]\n',
  );
  process.exit(command || opts.help ? 0 : 2);
}
if (command === 'build') await buildCommand(opts);
else if (command === 'types') typesCommand(opts);
else fail(`unknown command ${command}; known: build, types`);
