//! Process trees and PID resolution through the real `/proc` (Linux), and a made-up `/proc` for
//! processes that vanish.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vramscope_monitor::procs::{ProcessTree, Resolver};

#[cfg(target_os = "linux")]
#[test]
fn follows_children_and_grandchildren() {
    let mut child = Command::new("sh")
        .args(["-c", "sleep 5 & (sleep 5 & wait) & wait"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let root = child.id();
    let mut tree = ProcessTree::new(root);
    let resolver = Resolver::new();
    let sleeps = |members: &std::collections::BTreeSet<u32>| {
        members
            .iter()
            .filter(|&&p| resolver.info(p).command.as_deref() == Some("sleep 5"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    // sh, sleep, the subshell and its sleep; a forked child shows the shell's command line until
    // it has exec'd `sleep`, so wait for both sleeps too
    loop {
        let members = tree.refresh();
        let ready = members.len() >= 4 && (resolver.nested_namespace() || sleeps(members) == 2);
        if ready || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let members = tree.members().clone();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(members.len() >= 4, "{members:?}");
    assert!(members.contains(&root));
    if !resolver.nested_namespace() {
        assert_eq!(sleeps(&members), 2, "{members:?}");
    }
    // not our own test process, nor its other threads' PIDs
    assert!(!members.contains(&std::process::id()));
}

#[cfg(target_os = "linux")]
#[test]
fn resolves_this_process() {
    let r = Resolver::new();
    let me = r.info(std::process::id());
    if r.nested_namespace() {
        assert_eq!(me.unresolved, Some("other PID namespace"));
        return;
    }
    assert_eq!(me.unresolved, None);
    let exe = std::env::current_exe().unwrap();
    let name = exe.file_name().unwrap().to_str().unwrap();
    assert!(me.command.as_deref().unwrap().contains(name), "{me:?}");
    assert!(me.user.is_some());
}

#[test]
fn vanished_processes_and_missing_proc_are_unknown_not_errors() {
    let dir = std::env::temp_dir().join(format!("vramscope-proc-{}", std::process::id()));
    let p = dir.join("proc/31");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    std::fs::write(
        dir.join("etc/passwd"),
        "alice:x:1000:1000::/home/alice:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        p.join("status"),
        "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\n",
    )
    .unwrap();
    std::fs::write(p.join("cmdline"), b"python3\0train.py\0").unwrap();
    let r = Resolver::with_root(&dir);
    let proc = dir.join("proc");
    let found = r.info_in(&proc, 31);
    assert_eq!(found.user.as_deref(), Some("alice"));
    assert_eq!(found.command.as_deref(), Some("python3 train.py"));
    let gone = r.info_in(&proc, 32);
    assert_eq!(
        (gone.user, gone.command, gone.unresolved),
        (None, None, Some("exited"))
    );
    // a zombie has an empty command line: its name is shown instead
    std::fs::write(p.join("cmdline"), b"").unwrap();
    assert_eq!(r.info_in(&proc, 31).command.as_deref(), Some("[python3]"));
    // unknown uid: the number
    std::fs::write(p.join("status"), "Name:\tx\nUid:\t4321\t0\t0\t0\n").unwrap();
    assert_eq!(r.info_in(&proc, 31).user.as_deref(), Some("4321"));
    std::fs::remove_dir_all(&dir).unwrap();

    let mut tree = ProcessTree::in_proc(Path::new("/nonexistent-proc"), 5);
    assert!(
        tree.refresh().is_empty(),
        "an exited root leaves an empty tree"
    );
}

#[test]
fn tree_from_a_proc_without_children_files() {
    let dir = std::env::temp_dir().join(format!("vramscope-tree-{}", std::process::id()));
    for (pid, ppid) in [(10, 1), (11, 10), (12, 11), (13, 1), (14, 12)] {
        let p = dir.join(pid.to_string());
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("stat"), format!("{pid} (a (b) c) S {ppid} 0 0")).unwrap();
    }
    let mut tree = ProcessTree::in_proc(&dir, 10);
    let got: Vec<u32> = tree.refresh().iter().copied().collect();
    assert_eq!(got, [10, 11, 12, 14]);
    // the root exits: its descendants stay followed
    std::fs::remove_dir_all(dir.join("10")).unwrap();
    let got: Vec<u32> = tree.refresh().iter().copied().collect();
    assert_eq!(got, [11, 12, 14]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A real process tree and the recorder together: memory the driver reports for a grandchild
/// counts as the command's; memory of other processes does not.
#[cfg(target_os = "linux")]
#[test]
fn grandchild_memory_counts_per_process() {
    use vramscope_monitor::{Attribution, GpuProcess, GpuSample, Recorder};
    let mut child = Command::new("sh")
        .args(["-c", "(sleep 5 & wait) & wait"])
        .spawn()
        .unwrap();
    let mut tree = ProcessTree::new(child.id());
    let deadline = Instant::now() + Duration::from_secs(5);
    while tree.refresh().len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let deepest = *tree.members().iter().max().unwrap();
    let members = tree.members().clone();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(deepest != child.id(), "{members:?}");
    let gpu = |procs: Vec<GpuProcess>| GpuSample {
        index: 0,
        name: None,
        memory_used_bytes: Some(procs.iter().filter_map(|p| p.used_bytes).sum()),
        memory_total_bytes: None,
        utilization_percent: None,
        temperature_c: None,
        power_milliwatts: None,
        processes: procs,
    };
    let p = |pid, mib: u64| GpuProcess {
        pid,
        used_bytes: Some(mib << 20),
    };
    let other = std::process::id();
    let mut r = Recorder::new(&[gpu(vec![p(other, 100)])]);
    r.record(0.1, &[gpu(vec![p(other, 100), p(deepest, 700)])], |x| {
        members.contains(&x)
    });
    r.record(0.2, &[gpu(vec![p(other, 5000)])], |x| members.contains(&x));
    assert_eq!(r.attribution(), Attribution::PerProcess);
    assert_eq!(r.summary().peak_bytes, Some(700 << 20));
    assert_eq!(r.summary().peak_at_s, Some(0.1));
}
