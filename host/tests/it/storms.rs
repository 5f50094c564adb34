//! Storms: thousands of file writes, editor-style renames, directory moves and deletions in bursts,
//! and a file rewritten for longer than `debounce_max`. Every object ends at its last written
//! state, the queue drains, and the host's memory returns near where it was before the storm.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::common::host::{Host, noop};

const T: Duration = Duration::from_secs(120);

/// The host process's resident memory, found by its config path in `/proc/*/cmdline`.
fn rss_kib(config: &Path) -> Option<u64> {
    let needle = config.to_string_lossy().to_string();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = e.file_name().to_string_lossy().to_string();
        if pid.parse::<u32>().is_err() {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if !String::from_utf8_lossy(&cmd).contains(&needle) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        return line.split_whitespace().nth(1)?.parse().ok();
    }
    None
}

/// The files as the test last wrote them: relative path → (object name → value).
#[derive(Default)]
struct Model {
    files: BTreeMap<PathBuf, BTreeMap<String, String>>,
}

impl Model {
    fn text(&self, file: &Path) -> String {
        self.files[file].iter().map(|(n, v)| noop(n, v)).collect::<Vec<_>>().join("---\n")
    }

    fn objects(&self) -> BTreeMap<String, String> {
        self.files.values().flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone()))).collect()
    }
}

/// Polls the API until every Noop object is Synced at the model's value and no other exists.
async fn converged(h: &Host, want: &BTreeMap<String, String>) {
    let listed = async || {
        let views = h.api().get("/api/v1/resources?kind=Noop").await.unwrap_or(Value::Null);
        let views = views.as_array().cloned().unwrap_or_default();
        let got: BTreeMap<String, String> = views
            .iter()
            .filter(|v| v["phase"] == "Synced" && v["observedGeneration"] == v["generation"])
            .map(|v| (v["name"].as_str().unwrap_or("").to_string(), v["status"]["value"].as_str().unwrap_or("").into()))
            .collect();
        let wrong: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .take(3)
            .map(|(k, v)| {
                let view = views.iter().find(|x| x["name"] == k.as_str());
                format!("{k}: want {v}, have {view:#?}")
            })
            .collect();
        Listed { known: views.len(), synced: got.len(), wrong }
    };
    let what = h.waiting_for(format!("all {} objects Synced at their last value, and no other", want.len()));
    common::eventually(T, what, listed, |l| l.wrong.is_empty() && l.known == want.len() && l.synced == l.known).await;
}

/// What the API lists, against the model.
#[derive(Debug)]
struct Listed {
    /// Noop objects listed.
    known: usize,
    /// Of them, Synced at their generation.
    synced: usize,
    /// The first few objects not at their last value.
    wrong: Vec<String>,
}

async fn queue_drained(h: &Host) {
    h.wait_get("/api/v1/overview", T, "the queue drained", |v| v["queueLength"] == 0 && v["running"] == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_writes_renames_moves_and_deletes_end_at_the_last_written_state() {
    let _heavy = common::heavy().await;
    let mut h = Host::new("queue: { debounce: 100ms, debounce_max: 1s }\n");
    let root = h.resources();
    let mut model = Model::default();
    let mut next = 0usize;
    // 40 directories of 10 files of 5 objects: 2,000 objects.
    for d in 0..40 {
        for f in 0..10 {
            let rel = PathBuf::from(format!("d{d:02}/f{f}.yaml"));
            let objs: BTreeMap<String, String> = (0..5).map(|i| (format!("o{:05}", next + i), "v0".into())).collect();
            next += 5;
            model.files.insert(rel.clone(), objs);
            h.write(&rel.to_string_lossy(), &model.text(&rel));
        }
    }
    h.start().await;
    converged(&h, &model.objects()).await;
    queue_drained(&h).await;
    let config = h.config_path();
    let before = rss_kib(&config).expect("the host's memory");

    let mut rng = fastrand::Rng::with_seed(7);
    let mut ops = 0usize;
    for burst in 0..10 {
        for _ in 0..400 {
            ops += 1;
            let files: Vec<PathBuf> = model.files.keys().cloned().collect();
            let file = files[rng.usize(..files.len())].clone();
            match rng.u8(..100) {
                // Rewrite in place (truncate and write: a reader may see it half written).
                0..=39 => {
                    for v in model.files.get_mut(&file).unwrap().values_mut() {
                        *v = format!("b{burst}-{ops}");
                    }
                    std::fs::write(root.join(&file), model.text(&file)).unwrap();
                }
                // An editor's save: write a hidden temporary beside it, then rename over it.
                40..=64 => {
                    for v in model.files.get_mut(&file).unwrap().values_mut().filter(|_| rng.bool()) {
                        *v = format!("e{burst}-{ops}");
                    }
                    let tmp = root.join(file.parent().unwrap()).join(format!(".{}.swp", ops));
                    std::fs::write(&tmp, model.text(&file)).unwrap();
                    std::fs::rename(&tmp, root.join(&file)).unwrap();
                }
                // Rename the file: its objects move, unchanged.
                65..=74 => {
                    let to = file.with_file_name(format!("r{ops}.yaml"));
                    std::fs::rename(root.join(&file), root.join(&to)).unwrap();
                    let objs = model.files.remove(&file).unwrap();
                    model.files.insert(to, objs);
                }
                // Move a whole directory.
                75..=79 => {
                    let dir = file.parent().unwrap().to_path_buf();
                    let to = PathBuf::from(format!("m{ops}"));
                    std::fs::rename(root.join(&dir), root.join(&to)).unwrap();
                    let moved: Vec<PathBuf> = model.files.keys().filter(|f| f.starts_with(&dir)).cloned().collect();
                    for f in moved {
                        let objs = model.files.remove(&f).unwrap();
                        model.files.insert(to.join(f.strip_prefix(&dir).unwrap()), objs);
                    }
                }
                // Delete a file, and its objects with it.
                80..=89 if model.files.len() > 50 => {
                    std::fs::remove_file(root.join(&file)).unwrap();
                    model.files.remove(&file);
                }
                // A new file with new objects.
                _ => {
                    let rel = PathBuf::from(format!("new/b{burst}-{ops}.yaml"));
                    let objs: BTreeMap<String, String> =
                        (0..5).map(|i| (format!("o{:05}", next + i), "new".to_string())).collect();
                    next += 5;
                    model.files.insert(rel.clone(), objs);
                    std::fs::create_dir_all(root.join("new")).unwrap();
                    std::fs::write(root.join(&rel), model.text(&rel)).unwrap();
                }
            }
        }
    }
    assert_eq!(ops, 4000);
    converged(&h, &model.objects()).await;
    queue_drained(&h).await;
    // Memory goes back near where it was: what the storm allocated is freed and returned.
    let bound = before + before / 2 + 20 * 1024;
    let what = format!("the host's RSS back under {bound} KiB ({before} KiB before the storm)");
    common::eventually(T, what, async || rss_kib(&config).expect("the host's memory"), |now| *now <= bound).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_for_longer_than_debounce_max_is_read_meanwhile_and_ends_at_its_last_write() {
    let mut h = Host::new("queue: { debounce: 100ms, debounce_max: 500ms }\n");
    // The rewritten document is closed by a marker: a read while the file is written takes only
    // such documents (its last may be cut mid-value), the last once the writes stop.
    let text = |value: &str| format!("{}---\n{}", noop("hot", value), noop("cold", "c"));
    h.write("hot.yaml", &text("w0"));
    h.start().await;
    h.wait_object("Noop/default/hot", T, "w0", |v| v.is_some_and(|v| v["status"]["value"] == "w0")).await;
    let path = h.resources().join("hot.yaml");
    let mut seen_during = Vec::new();
    // A bound on the writes, not on the time they take: at 20 ms apart, a minute of them, over a
    // hundred times debounce_max.
    const MAX_WRITES: u32 = 3_000;
    let mut n = 0;
    // Rewritten every 20 ms, well within the debounce: the quiet period never comes, and the
    // host must read the file all the same, each time debounce_max has passed. It is rewritten
    // until it was read twice meanwhile (a loop of its own rather than `eventually`: the writes
    // may not pause while the condition is looked at).
    while seen_during.len() < 2 {
        assert!(
            n < MAX_WRITES,
            "after {n} writes the file was read {} times while it kept changing: {seen_during:?}",
            seen_during.len()
        );
        n += 1;
        std::fs::write(&path, text(&format!("w{n}"))).unwrap();
        if n % 10 == 0
            && let Some(v) = h.object("Noop/default/hot").await
        {
            let value = v["status"]["value"].as_str().unwrap_or("").to_string();
            if value != "w0" && seen_during.last() != Some(&value) {
                seen_during.push(value);
            }
        }
        common::poll_pause(20).await;
    }
    let last = format!("w{n}");
    h.wait_object("Noop/default/hot", T, "the last write", |v| {
        v.is_some_and(|v| v["status"]["value"] == last.as_str())
    })
    .await;
    queue_drained(&h).await;
}
