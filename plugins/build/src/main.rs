//! `cargo run -p steward-plugin-build -- [--out DIR] [PACKAGE...]`: builds plugins and copies them to DIR.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut out: Option<PathBuf> = None;
    let mut packages: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => match args.next() {
                Some(d) => out = Some(PathBuf::from(d)),
                None => {
                    eprintln!("--out needs a directory");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!(
                    "usage: steward-plugin-build [--out DIR] [PACKAGE...]\n\nBuilds the named plugin packages (default: the bundled ones) for wasm32-wasip2\nand copies each as NAME.wasm into DIR (default: target/plugins)."
                );
                return ExitCode::SUCCESS;
            }
            p => packages.push(p.to_string()),
        }
    }
    if packages.is_empty() {
        packages = steward_plugin_build::BUNDLED.iter().map(|s| s.to_string()).collect();
    }
    let out = out.unwrap_or_else(|| steward_plugin_build::workspace_root().join("target").join("plugins"));
    let refs: Vec<&str> = packages.iter().map(String::as_str).collect();
    let built = match steward_plugin_build::build(&refs) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
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
    ExitCode::SUCCESS
}
