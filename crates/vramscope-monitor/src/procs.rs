//! Processes behind GPU PIDs, read from `/proc` (Linux). Everything degrades gracefully: a process
//! that exited, a PID from another PID namespace (vramscope inside a container sees the host's
//! PIDs from NVML) or a system without `/proc` gives "unknown", never an error.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// What could be found out about one PID.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcessInfo {
    /// The PID.
    pub pid: u32,
    /// Owner's user name (or numeric uid when it has no name); `None` when unknown.
    pub user: Option<String>,
    /// Command line; `None` when unknown.
    pub command: Option<String>,
    /// Why the process could not be resolved: `exited` or `other PID namespace`; `None` when it
    /// was.
    pub unresolved: Option<&'static str>,
}

/// Resolves PIDs to users and commands; caches `/etc/passwd`.
#[derive(Debug, Default)]
pub struct Resolver {
    users: HashMap<u32, String>,
    nested_namespace: bool,
}

impl Resolver {
    /// Reads `/etc/passwd` and finds out whether this process lives in a nested PID namespace.
    pub fn new() -> Self {
        Resolver::with_root(Path::new("/"))
    }

    /// As [`Resolver::new`] with `/etc` and `/proc` under `root` (for tests).
    pub fn with_root(root: &Path) -> Self {
        let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap_or_default();
        let status = std::fs::read_to_string(root.join("proc/self/status")).unwrap_or_default();
        Resolver {
            users: parse_passwd(&passwd),
            nested_namespace: in_nested_pid_namespace(&status),
        }
    }

    /// Whether vramscope runs inside a nested PID namespace (a container), where NVML's PIDs are
    /// not this process's PIDs.
    pub fn nested_namespace(&self) -> bool {
        self.nested_namespace
    }

    /// Looks `pid` up in `/proc`.
    pub fn info(&self, pid: u32) -> ProcessInfo {
        self.info_in(Path::new("/proc"), pid)
    }

    /// Looks `pid` up under `proc` (a `/proc`-like directory, for tests).
    pub fn info_in(&self, proc: &Path, pid: u32) -> ProcessInfo {
        let unknown = |why| ProcessInfo {
            pid,
            user: None,
            command: None,
            unresolved: Some(why),
        };
        if self.nested_namespace {
            // NVML's PIDs are the host's: a PID that exists here may be another process
            return unknown("other PID namespace");
        }
        let dir = proc.join(pid.to_string());
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            return unknown("exited");
        };
        let user = uid(&status).map(|u| self.users.get(&u).cloned().unwrap_or(u.to_string()));
        let command = std::fs::read(dir.join("cmdline"))
            .ok()
            .map(|raw| command_line(&raw))
            .filter(|c| !c.is_empty())
            .or_else(|| field(&status, "Name:").map(|n| format!("[{n}]")));
        ProcessInfo {
            pid,
            user,
            command,
            unresolved: None,
        }
    }
}

fn field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

fn uid(status: &str) -> Option<u32> {
    field(status, "Uid:")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `NSpid:` lists one PID per namespace level; more than one means a nested namespace.
fn in_nested_pid_namespace(self_status: &str) -> bool {
    field(self_status, "NSpid:").is_some_and(|l| l.split_whitespace().count() > 1)
}

fn parse_passwd(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let uid = f.nth(1)?.parse().ok()?;
            Some((uid, name.to_string()))
        })
        .collect()
}

fn command_line(raw: &[u8]) -> String {
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The parent PID in a `/proc/PID/stat` line (the command may contain spaces and parentheses).
fn parent_from_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A process and its descendants, followed through `/proc` as they start.
#[derive(Debug, Clone)]
pub struct ProcessTree {
    proc: std::path::PathBuf,
    members: BTreeSet<u32>,
}

impl ProcessTree {
    /// The tree rooted at `root`.
    pub fn new(root: u32) -> Self {
        ProcessTree::in_proc(Path::new("/proc"), root)
    }

    /// As [`ProcessTree::new`] reading a `/proc`-like directory (for tests).
    pub fn in_proc(proc: &Path, root: u32) -> Self {
        ProcessTree {
            proc: proc.to_path_buf(),
            members: BTreeSet::from([root]),
        }
    }

    /// The PIDs in the tree after the last refresh (exited ones are dropped, their children kept).
    pub fn members(&self) -> &BTreeSet<u32> {
        &self.members
    }

    /// Whether `pid` is in the tree.
    pub fn contains(&self, pid: u32) -> bool {
        self.members.contains(&pid)
    }

    /// Adds the processes started since the last call and forgets those that exited. Uses the
    /// kernel's `children` lists when it has them, else one scan of `/proc/*/stat`.
    pub fn refresh(&mut self) -> &BTreeSet<u32> {
        let alive: BTreeSet<u32> = self
            .members
            .iter()
            .copied()
            .filter(|p| self.proc.join(p.to_string()).exists())
            .collect();
        let found = self.children_lists(&alive).or_else(|| self.scan(&alive));
        self.members = found.unwrap_or(alive);
        &self.members
    }

    /// Descendants of `roots` (and `roots`) through `/proc/P/task/T/children`; `None` if the
    /// kernel has no such files.
    fn children_lists(&self, roots: &BTreeSet<u32>) -> Option<BTreeSet<u32>> {
        let mut out = roots.clone();
        let mut todo: Vec<u32> = roots.iter().copied().collect();
        let mut supported = roots.is_empty();
        while let Some(pid) = todo.pop() {
            let Ok(tasks) = std::fs::read_dir(self.proc.join(format!("{pid}/task"))) else {
                continue;
            };
            for task in tasks.flatten() {
                let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
                    continue;
                };
                supported = true;
                for c in list.split_whitespace().filter_map(|c| c.parse().ok()) {
                    if out.insert(c) {
                        todo.push(c);
                    }
                }
            }
        }
        supported.then_some(out)
    }

    /// Descendants of `roots` from the parent PIDs of every process; `None` without `/proc`.
    fn scan(&self, roots: &BTreeSet<u32>) -> Option<BTreeSet<u32>> {
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for e in std::fs::read_dir(&self.proc).ok()?.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            if let Some(ppid) = parent_from_stat(&stat) {
                children.entry(ppid).or_default().push(pid);
            }
        }
        let mut out = roots.clone();
        let mut todo: Vec<u32> = roots.iter().copied().collect();
        while let Some(pid) = todo.pop() {
            for &c in children.get(&pid).into_iter().flatten() {
                if out.insert(c) {
                    todo.push(c);
                }
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parent_with_odd_command_names() {
        assert_eq!(parent_from_stat("42 (a) b (c) S 7 42 42 0"), Some(7));
        assert_eq!(parent_from_stat("1 (systemd) S 0 1 1"), Some(0));
        assert_eq!(parent_from_stat("garbage"), None);
    }

    #[test]
    fn passwd_and_namespaces() {
        let users =
            parse_passwd("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/h:/bin/sh\nbad\n");
        assert_eq!(users.get(&1000).map(String::as_str), Some("alice"));
        assert_eq!(users.len(), 2);
        assert!(in_nested_pid_namespace("Name:\tx\nNSpid:\t8\t1\n"));
        assert!(!in_nested_pid_namespace("Name:\tx\nNSpid:\t8\n"));
        assert!(!in_nested_pid_namespace(""));
    }

    #[test]
    fn command_lines() {
        assert_eq!(
            command_line(b"python\0train.py\0--lr\x000.1\0"),
            "python train.py --lr 0.1"
        );
        assert_eq!(command_line(b""), "");
    }
}
