//! Orphans: the reaper kills only process groups certainly left by a dead host, and no child survives a host killed with SIGKILL.

use super::*;

#[tokio::test]
async fn reaping_kills_only_groups_that_are_certainly_ours() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim =
        std::os::unix::process::CommandExt::process_group(std::process::Command::new("sleep").arg("300"), 0)
            .spawn()
            .unwrap();
    let pid = victim.id();
    let stat = proc_stat(pid).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let rec = ChildRecord {
        pid,
        pgid: pid,
        start_time: stat.start_time,
        session: stat.session,
        boot_id: process::boot_id(),
        host_pid: gone.id(),
        host_start_time: 1,
        owner: "MCPServer/default/x".into(),
        service: "srv".into(),
        command: "sleep".into(),
    };
    let spared = [
        // The pid now belongs to a process started after the recorded one.
        ChildRecord { start_time: stat.start_time + 1, ..rec.clone() },
        // Another session.
        ChildRecord { session: stat.session + 1, ..rec.clone() },
        // An earlier boot.
        ChildRecord { boot_id: "another-boot".into(), ..rec.clone() },
        // The host that recorded it still runs (here: the victim itself stands for it).
        ChildRecord { host_pid: pid, host_start_time: stat.start_time, ..rec.clone() },
    ];
    orphans::write_records(dir.path(), spared.to_vec()).unwrap();
    assert_eq!(orphans::reap_orphans(dir.path()).unwrap(), Vec::<u32>::new());
    assert!(!is_gone(pid));

    orphans::write_records(dir.path(), vec![rec]).unwrap();
    assert_eq!(orphans::reap_orphans(dir.path()).unwrap(), vec![pid]);
    let status = victim.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
}

const HELPER_DIR: &str = "STEWARD_SERVICES_TEST_HELPER_DIR";
const HELPER_SPEC: &str = "STEWARD_SERVICES_TEST_HELPER_SPEC";

/// The child side of `no_child_survives_a_killed_host` (the same test, re-run in a child
/// process with `HELPER_DIR` set): a host that starts one service, prints its pid, and waits
/// to be killed.
async fn helper_host_process(dir: std::ffi::OsString, spec: String) -> ! {
    let spec: ServiceSpec = serde_json::from_str(&spec).unwrap();
    let (mgr, rx) = ServiceManager::start(test_opts(Path::new(&dir)), crate::services::Secrets::Files).unwrap();
    let mut h = Harness { mgr, rx, notified: Vec::new(), dir: tempfile::tempdir().unwrap() };
    let o = owner("helper");
    h.mgr.ensure(&o, vec![spec]);
    let pid = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    println!("SERVICE_PID={pid}");
    std::future::pending::<()>().await;
    unreachable!("the parent kills this process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_survives_a_killed_host() {
    if let (Some(dir), Ok(spec)) = (std::env::var_os(HELPER_DIR), std::env::var(HELPER_SPEC)) {
        helper_host_process(dir, spec).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let sleep_file = dir.path().join("sleep.pid");
    // The service leaves a grandchild in its process group: the parent-death
    // signal reaches only the direct child, so the grandchild is for the reaper.
    let (program, args) = example_server(&[]);
    let script = format!("sleep 300 & echo $! > '{}'; exec '{program}' {}", sleep_file.display(), args.join(" "));
    let spec = stdio("srv", ("sh".into(), vec!["-c".into(), script]));

    let name = concat!(module_path!(), "::no_child_survives_a_killed_host");
    let name = name.split_once("::").unwrap().1;
    let mut host = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(HELPER_DIR, &state)
        .env(HELPER_SPEC, serde_json::to_string(&spec).unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(host.stdout.take().unwrap()).lines();
    let service: u32 = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // libtest prints `test NAME ... ` just before, on the same line.
            if let Some((_, pid)) = line.split_once("SERVICE_PID=") {
                return pid.trim().parse().unwrap();
            }
        }
        panic!("the helper host ended without starting its service");
    })
    .await
    .expect("the helper host did not report its service");
    let grandchild: u32 = std::fs::read_to_string(&sleep_file).unwrap().trim().parse().unwrap();
    assert!(!is_gone(service) && !is_gone(grandchild));
    assert_eq!(proc_stat(grandchild).unwrap().pgrp, service, "the grandchild is in the service's group");

    sigkill(host.id().unwrap());
    host.wait().await.unwrap();
    wait_gone(service, "the service of the killed host").await;
    assert!(!is_gone(grandchild), "only the reaper catches what is left in the group");

    // The next run reaps the group the killed host left behind.
    let (mgr, _rx) = ServiceManager::start(test_opts(&state), crate::services::Secrets::Files).unwrap();
    wait_gone(grandchild, "the grandchild left by the killed host").await;
    assert!(orphans::read_records(&state).unwrap().is_empty());
    mgr.shutdown().await;
}
