//! `cargo run -p steward-plugin-build -- [--out DIR] [PACKAGE...]`: builds plugins and copies them to DIR.
//! `cargo run -p steward-plugin-build -- --example local`: sets up `examples/local` (its plugins and its MCP server),
//! and builds the host at the same time, so that `cargo run -p steward` then starts at once.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use steward_plugin_build::Progress;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut out: Option<PathBuf> = None;
    let mut example: Option<String> = None;
    let mut packages: Vec<String> = Vec::new();
    let mut for_tests = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => match args.next() {
                Some(d) => out = Some(PathBuf::from(d)),
                None => {
                    eprintln!("--out needs a directory");
                    return ExitCode::from(2);
                }
            },
            "--example" => match args.next() {
                Some(e) => example = Some(e),
                None => {
                    eprintln!("--example needs a name, for example `local`");
                    return ExitCode::from(2);
                }
            },
            "--tests" => for_tests = true,
            "-h" | "--help" => {
                println!(
                    "usage: steward-plugin-build [--out DIR] [--tests] [PACKAGE...]\n\nBuilds the named plugin packages (default: the bundled ones) for wasm32-wasip2\nand copies each as NAME.wasm into DIR (default: target/plugins). The TypeScript\nexamples (mcpservergroup-ts, stdioserver-ts) are built with the SDK in sdk-ts.\n--tests builds every plugin the tests use (bundled, test-only, the examples in\nRust, TypeScript and Python) ahead of them: .ci/run starts it beside the build\nof the tests."
                );
                return ExitCode::SUCCESS;
            }
            p => packages.push(p.to_string()),
        }
    }
    if for_tests {
        packages.extend(
            steward_plugin_build::BUNDLED
                .iter()
                .chain(steward_plugin_build::TEST_PLUGINS)
                .chain(steward_plugin_build::EXAMPLE_PLUGINS)
                .chain(steward_plugin_build::TS_PLUGINS)
                .map(|s| s.to_string()),
        );
    }
    if packages.is_empty() {
        packages = steward_plugin_build::BUNDLED.iter().map(|s| s.to_string()).collect();
    }
    let began = Instant::now();
    let what = match &example {
        Some(_) => format!("the host, the example MCP server and {} plugins", packages.len()),
        None => format!("{} plugin(s)", packages.len()),
    };
    eprintln!(
        "steward-plugin-build: building {what}. The first build compiles them and their dependencies \
         from source and takes a few minutes; later builds take seconds."
    );
    // The host, built beside the plugins (see `HostBuild`): only for an example, which runs it next.
    let mut host = None;
    if let Some(name) = &example {
        let root = steward_plugin_build::workspace_root().join("examples").join(name);
        if !root.is_dir() {
            eprintln!("error: there is no example {}", root.display());
            return ExitCode::FAILURE;
        }
        eprintln!(
            "==> building the host (steward) at the same time, quietly (cargo run -p steward then starts at once)"
        );
        match steward_plugin_build::HostBuild::start() {
            Ok(h) => host = Some(h),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
        out = Some(root.join("plugins"));
        let bin_dir = root.join("bin");
        let built = steward_plugin_build::build_native_with(
            steward_plugin_build::EXAMPLE_MCP,
            steward_plugin_build::EXAMPLE_MCP,
            &steward_plugin_build::workspace_root().join("target").join("tools"),
            Progress::Shown,
        );
        match built.and_then(|p| {
            std::fs::create_dir_all(&bin_dir).map_err(|e| steward_plugin_build::BuildError(e.to_string()))?;
            let dest = bin_dir.join(steward_plugin_build::EXAMPLE_MCP);
            std::fs::copy(&p, &dest).map_err(|e| steward_plugin_build::BuildError(e.to_string()))?;
            Ok(dest)
        }) {
            Ok(p) => println!("{}", p.display()),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let out = out.unwrap_or_else(|| steward_plugin_build::workspace_root().join("target").join("plugins"));
    // The TypeScript plugins are built by the SDK in sdk-ts, the rest by cargo.
    let (ts, rust): (Vec<&str>, Vec<&str>) =
        packages.iter().map(String::as_str).partition(|p| steward_plugin_build::TS_PLUGINS.contains(p));
    let mut built = match steward_plugin_build::build_with(&rust, Progress::Shown) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    for p in ts {
        eprintln!("==> building TypeScript plugin {p} with componentize-js");
        match steward_plugin_build::typescript_plugin(p) {
            Ok(path) => {
                built.insert(p.to_string(), path);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if for_tests {
        for p in steward_plugin_build::PY_PLUGINS {
            eprintln!("==> building Python plugin {p} with componentize-py");
            match steward_plugin_build::python_example(p) {
                Ok(path) => {
                    built.insert(p.to_string(), path);
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("error: cannot create {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    for (pkg, path) in built {
        let dest = out.join(format!("{pkg}.wasm"));
        if let Err(e) = std::fs::copy(&path, &dest) {
            eprintln!("error: cannot copy {} to {}: {e}", path.display(), dest.display());
            return ExitCode::FAILURE;
        }
        println!("{}", dest.display());
    }
    if let Some(h) = host {
        eprintln!("==> waiting for the host build (steward)");
        match h.wait() {
            Ok(took) => eprintln!("==> building the host (steward): done in {:.1}s", took.as_secs_f64()),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    eprintln!("steward-plugin-build: done in {:.1}s", began.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}
