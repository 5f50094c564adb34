//! `escape`: every way out of the sandbox a plugin can try, through Rust's std and through
//! the raw WASI imports, each reported as `{ "attempt", "error" }` (or `{ "attempt", "escaped" }`
//! with what it got, which a hostile plugin would exfiltrate through its status).

use steward_sdk::prelude::*;

use crate::MisbehaveSpec;

/// What one attempt got: `Ok` with what escaped, or `Err` with the error the plugin saw.
type Attempt = Result<String, String>;

/// Runs every attempt, logs each outcome, and returns them as the status.
///
/// The status also keeps one flat `denied: …` / `ESCAPED: …` string per family of attempt
/// (`file`, `cwdFile`, `dir`, `write`, `env`, `home`, `socket`, `udp`, `spawn`).
pub fn run(ctx: &Context, spec: &MisbehaveSpec) -> serde_json::Value {
    let mut attempts: Vec<(String, Attempt)> = Vec::new();
    let mut attempt = |name: String, outcome: Attempt| {
        match &outcome {
            Ok(got) => ctx.warn(&format!("escape attempt {name}: ESCAPED: {}", shown(got))),
            Err(e) => ctx.info(&format!("escape attempt {name}: denied: {e}")),
        }
        attempts.push((name, outcome));
    };

    // Files and directories through std (wasi-libc resolves paths against the preopens).
    attempt("std::fs::read /etc/passwd".into(), read("/etc/passwd"));
    attempt("std::fs::read Cargo.toml (relative)".into(), read("Cargo.toml"));
    if !spec.secret_file.is_empty() {
        attempt(format!("std::fs::read {}", spec.secret_file), read(&spec.secret_file));
        let base = spec.secret_file.rsplit('/').next().unwrap_or_default();
        attempt(format!("std::fs::read {base} (relative)"), read(base));
    }
    attempt("std::fs::read_dir /".into(), list("/"));
    attempt("std::fs::read_dir . (relative)".into(), list("."));
    attempt("std::fs::write /tmp/steward-escape".into(), write("/tmp/steward-escape"));
    if !spec.dir.is_empty() {
        attempt(format!("std::fs::read_dir {}", spec.dir), list(&spec.dir));
        let target = format!("{}/escaped.txt", spec.dir);
        attempt(format!("std::fs::write {target}"), write(&target));
    }

    // The environment through std.
    // The host's own settings (`steward_sdk::settings::VARS`) are given, not escaped to.
    let vars: Vec<String> = std::env::vars()
        .filter(|(k, _)| !steward_sdk::settings::VARS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    attempt("std::env::vars".into(), non_empty(vars, "the environment is empty but the host's settings"));
    attempt("std::env::var HOME".into(), std::env::var("HOME").map_err(|e| e.to_string()));
    if !spec.env_var.is_empty() {
        attempt(format!("std::env::var {}", spec.env_var), std::env::var(&spec.env_var).map_err(|e| e.to_string()));
    }
    let args: Vec<String> = std::env::args().collect();
    attempt("std::env::args".into(), non_empty(args, "there are no arguments"));

    // The network through std.
    attempt(
        format!("std::net::TcpStream::connect 127.0.0.1:{}", spec.port),
        std::net::TcpStream::connect(("127.0.0.1", spec.port)).map(|_| "connected".into()).map_err(|e| e.to_string()),
    );
    attempt(
        "std::net::TcpListener::bind 127.0.0.1:0".into(),
        std::net::TcpListener::bind("127.0.0.1:0")
            .map(|l| format!("listening on {:?}", l.local_addr()))
            .map_err(|e| e.to_string()),
    );
    attempt(format!("std::net::UdpSocket send_to 127.0.0.1:{}", spec.udp_port), udp_send(spec.udp_port));
    attempt(format!("std::net::ToSocketAddrs localhost:{}", spec.port), resolve(("localhost", spec.port)));
    attempt("std::net::ToSocketAddrs example.com:80".into(), resolve(("example.com", 80)));

    // Processes through std: `Command` compiles for wasm32-wasip2 and fails when run.
    attempt(
        "std::process::Command /bin/sh -c true".into(),
        std::process::Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .map(|s| format!("ran: {s}"))
            .map_err(|e| e.to_string()),
    );

    // The same through the raw WASI imports, with no std or libc in between.
    for (name, outcome) in raw::attempts(spec) {
        attempt(name, outcome);
    }

    let flat = |family: &str| -> String {
        let prefix = match family {
            "file" => "std::fs::read /etc/passwd",
            "cwdFile" => "std::fs::read Cargo.toml",
            "dir" => "std::fs::read_dir /",
            "write" => "std::fs::write /tmp/steward-escape",
            "env" => "std::env::vars",
            "home" => "std::env::var HOME",
            "socket" => "std::net::TcpStream::connect",
            "udp" => "std::net::UdpSocket",
            _ => "std::process::Command",
        };
        match attempts.iter().find(|(n, _)| n.starts_with(prefix)).map(|(_, o)| o) {
            Some(Ok(got)) => format!("ESCAPED: {}", shown(got)),
            Some(Err(e)) => format!("denied: {e}"),
            None => "not attempted".into(),
        }
    };
    let mut status = serde_json::json!({
        "attempts": attempts
            .iter()
            .map(|(name, outcome)| match outcome {
                Ok(got) => serde_json::json!({ "attempt": name, "escaped": got }),
                Err(e) => serde_json::json!({ "attempt": name, "error": e }),
            })
            .collect::<Vec<_>>(),
    });
    for family in ["file", "cwdFile", "dir", "write", "env", "home", "socket", "udp", "spawn"] {
        status[family] = flat(family).into();
    }
    status
}

fn shown(got: &str) -> String {
    got.chars().take(200).collect()
}

fn read(path: &str) -> Attempt {
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}

fn list(path: &str) -> Attempt {
    let entries = std::fs::read_dir(path).map_err(|e| e.to_string())?;
    let names: Vec<String> = entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into()).collect();
    Ok(format!("{} entries: {}", names.len(), names.join(", ")))
}

fn write(path: &str) -> Attempt {
    std::fs::write(path, b"written from inside the sandbox").map(|()| "written".into()).map_err(|e| e.to_string())
}

fn non_empty(items: Vec<String>, empty: &str) -> Attempt {
    if items.is_empty() { Err(empty.into()) } else { Ok(items.join(" ")) }
}

fn udp_send(port: u16) -> Attempt {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    socket
        .send_to(b"escaped over UDP", ("127.0.0.1", port))
        .map(|n| format!("sent {n} bytes"))
        .map_err(|e| e.to_string())
}

fn resolve(addr: impl std::net::ToSocketAddrs) -> Attempt {
    let found: Vec<String> = addr.to_socket_addrs().map_err(|e| e.to_string())?.map(|a| a.to_string()).collect();
    non_empty(found, "resolved to no address")
}

#[cfg(target_arch = "wasm32")]
mod raw {
    //! The raw WASI 0.2 imports (the `wasip2` crate's bindings).

    use wasip2::cli::environment;
    use wasip2::filesystem::preopens;
    use wasip2::sockets::network::{ErrorCode, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
    use wasip2::sockets::udp::OutgoingDatagram;
    use wasip2::sockets::{instance_network, ip_name_lookup, tcp_create_socket, udp_create_socket};

    use super::{Attempt, MisbehaveSpec, non_empty};

    fn loopback(port: u16) -> IpSocketAddress {
        IpSocketAddress::Ipv4(Ipv4SocketAddress { port, address: (127, 0, 0, 1) })
    }

    pub fn attempts(spec: &MisbehaveSpec) -> Vec<(String, Attempt)> {
        let dirs: Vec<String> = preopens::get_directories().into_iter().map(|(_, path)| path).collect();
        let env: Vec<String> = environment::get_environment()
            .into_iter()
            .filter(|(k, _)| !steward_sdk::settings::VARS.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        vec![
            ("wasi:filesystem/preopens get-directories".into(), non_empty(dirs, "no directory is preopened")),
            (
                "wasi:cli/environment get-environment".into(),
                non_empty(env, "the environment is empty but the host's settings"),
            ),
            ("wasi:cli/environment get-arguments".into(), non_empty(environment::get_arguments(), "no arguments")),
            (
                "wasi:cli/environment initial-cwd".into(),
                environment::initial_cwd().ok_or_else(|| "no working directory".to_string()),
            ),
            (format!("wasi:sockets/tcp connect 127.0.0.1:{}", spec.port), tcp_connect(spec.port)),
            (format!("wasi:sockets/udp send 127.0.0.1:{}", spec.udp_port), udp_send(spec.udp_port)),
            ("wasi:sockets/ip-name-lookup localhost".into(), lookup("localhost")),
            ("wasi:sockets/ip-name-lookup 127.0.0.1".into(), lookup("127.0.0.1")),
        ]
    }

    /// `what: error-code`, as WASI names the code.
    fn failed(what: &str) -> impl FnOnce(ErrorCode) -> String + '_ {
        move |e| format!("{what}: {}", e.name())
    }

    fn tcp_connect(port: u16) -> Attempt {
        let network = instance_network::instance_network();
        let socket =
            tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4).map_err(failed("create-tcp-socket"))?;
        socket.start_connect(&network, loopback(port)).map_err(failed("start-connect"))?;
        socket.subscribe().block();
        socket.finish_connect().map(|_| "connected".into()).map_err(failed("finish-connect"))
    }

    fn udp_send(port: u16) -> Attempt {
        let network = instance_network::instance_network();
        let socket =
            udp_create_socket::create_udp_socket(IpAddressFamily::Ipv4).map_err(failed("create-udp-socket"))?;
        socket.start_bind(&network, loopback(0)).map_err(failed("start-bind"))?;
        socket.subscribe().block();
        socket.finish_bind().map_err(failed("finish-bind"))?;
        let (_incoming, outgoing) = socket.stream(Some(loopback(port))).map_err(failed("stream"))?;
        outgoing.subscribe().block();
        outgoing.check_send().map_err(failed("check-send"))?;
        let datagram = OutgoingDatagram { data: b"escaped over raw UDP".to_vec(), remote_address: None };
        outgoing.send(&[datagram]).map(|n| format!("sent {n} datagrams")).map_err(failed("send"))
    }

    fn lookup(name: &str) -> Attempt {
        let network = instance_network::instance_network();
        let stream = ip_name_lookup::resolve_addresses(&network, name).map_err(failed("resolve-addresses"))?;
        let mut found = Vec::new();
        loop {
            match stream.resolve_next_address() {
                Ok(Some(addr)) => found.push(format!("{addr:?}")),
                Ok(None) => break,
                Err(ErrorCode::WouldBlock) => stream.subscribe().block(),
                Err(e) => return Err(failed("resolve-next-address")(e)),
            }
        }
        non_empty(found, "resolved to no address")
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod raw {
    //! Natively there is no WASI to reach for.

    use super::{Attempt, MisbehaveSpec};

    pub fn attempts(_spec: &MisbehaveSpec) -> Vec<(String, Attempt)> {
        Vec::new()
    }
}
