//! Repository hygiene, checked as ordinary tests so plain `cargo test` catches drift.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn metadata() -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Normal (non-dev, non-build) dependency closure of a workspace package, by crate name.
fn closure(meta: &serde_json::Value, package: &str) -> BTreeSet<String> {
    let packages: BTreeMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let start = packages
        .values()
        .find(|p| p["name"] == package && p["source"].is_null())
        .unwrap_or_else(|| panic!("{package} not in the workspace"))["id"]
        .as_str()
        .unwrap();
    let mut seen = BTreeSet::new();
    let mut stack = vec![start];
    let mut names = BTreeSet::new();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            if normal {
                let dep_id = dep["pkg"].as_str().unwrap();
                names.insert(packages[dep_id]["name"].as_str().unwrap().to_owned());
                stack.push(dep_id);
            }
        }
    }
    names
}

#[test]
fn lower_layers_never_depend_on_a_runtime_or_transport() {
    let meta = metadata();
    let forbidden = [
        "tokio",
        "tokio-util",
        "mio",
        "rustls",
        "tokio-rustls",
        "hyper",
        "async-std",
    ];
    for package in [
        "eddy-wire",
        "eddy-codec",
        "eddy-options",
        "eddy-auth",
        "eddy-log",
        "eddy-stream-store",
        "eddy-event-store",
        "eddy-consensus",
    ] {
        let deps = closure(&meta, package);
        for f in forbidden {
            assert!(!deps.contains(f), "{package} depends on {f}: {deps:?}");
        }
    }
}

/// The library crates, server included: what the binary, the tests and xtask may build on.
const EVERY_LIBRARY: &[&str] = &[
    "eddy-wire",
    "eddy-options",
    "eddy-codec",
    "eddy-auth",
    "eddy-log",
    "eddy-stream-store",
    "eddy-event-store",
    "eddy-consensus",
    "eddy-replicated",
    "eddy-client",
    "eddy-ctl",
    "eddy-server",
];

/// What the real-process tests build on: every library and the binary's command line (their
/// test server is `eddy::cli::main` with the binary's allocator).
const EVERY_LIBRARY_AND_THE_COMMAND_LINE: &[&str] = &[
    "eddy-wire",
    "eddy-options",
    "eddy-codec",
    "eddy-auth",
    "eddy-log",
    "eddy-stream-store",
    "eddy-event-store",
    "eddy-consensus",
    "eddy-replicated",
    "eddy-client",
    "eddy-ctl",
    "eddy-server",
    "eddy",
];

/// Every workspace crate and the eddy crates it may depend on (directly or not): the arrows
/// of docs/ARCHITECTURE.md. A crate missing here fails the test, so a new crate must say where
/// it sits.
const ALLOWED: &[(&str, &[&str])] = &[
    ("eddy-wire", &[]),
    ("eddy-options", &[]),
    ("eddy-codec", &["eddy-wire", "eddy-options"]),
    ("eddy-auth", &["eddy-wire", "eddy-options", "eddy-codec"]),
    ("eddy-log", &[]),
    ("eddy-stream-store", &["eddy-log"]),
    ("eddy-event-store", &["eddy-log"]),
    (
        "eddy-consensus",
        &["eddy-wire", "eddy-options", "eddy-codec", "eddy-log"],
    ),
    // The embeddable client: eddy's protocol crates only.
    ("eddy-client", &["eddy-wire", "eddy-options", "eddy-codec"]),
    // The command line's client subcommands: the client and the protocol crates, never the
    // server or its stores.
    (
        "eddy-ctl",
        &["eddy-wire", "eddy-options", "eddy-codec", "eddy-client"],
    ),
    // The replicated state machines, with no async runtime: the stores under consensus.
    (
        "eddy-replicated",
        &[
            "eddy-wire",
            "eddy-options",
            "eddy-codec",
            "eddy-auth",
            "eddy-log",
            "eddy-stream-store",
            "eddy-event-store",
            "eddy-consensus",
        ],
    ),
    (
        "eddy-server",
        &[
            "eddy-wire",
            "eddy-options",
            "eddy-codec",
            "eddy-auth",
            "eddy-log",
            "eddy-stream-store",
            "eddy-event-store",
            "eddy-consensus",
            "eddy-replicated",
        ],
    ),
    // The simulator runs the consensus crate, the real stores under it and the very state
    // machines the server runs, beside the server rather than above it: nothing with sockets
    // or an async runtime, and nothing depends on it.
    (
        "eddy-sim",
        &[
            "eddy-wire",
            "eddy-options",
            "eddy-codec",
            "eddy-auth",
            "eddy-log",
            "eddy-stream-store",
            "eddy-event-store",
            "eddy-consensus",
            "eddy-replicated",
        ],
    ),
    // The binary owns the command line: the server and the client subcommands side by side.
    ("eddy", EVERY_LIBRARY),
    ("eddy-tests", EVERY_LIBRARY_AND_THE_COMMAND_LINE),
    ("xtask", EVERY_LIBRARY),
];

/// The workspace's own packages, by name.
fn workspace_packages(meta: &serde_json::Value) -> BTreeSet<String> {
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["source"].is_null())
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn dependencies_point_down() {
    let meta = metadata();
    let ours = workspace_packages(&meta);
    for package in &ours {
        let ok = ALLOWED
            .iter()
            .find(|(name, _)| name == package)
            .unwrap_or_else(|| panic!("{package} is not placed in tidy.rs's ALLOWED layers"))
            .1;
        for d in closure(&meta, package).intersection(&ours) {
            assert!(ok.contains(&d.as_str()), "{package} must not depend on {d}");
        }
    }
}

#[test]
fn the_log_depends_on_no_eddy_crate_and_the_stores_not_on_each_other() {
    let meta = metadata();
    let ours = workspace_packages(&meta);
    let log: Vec<String> = closure(&meta, "eddy-log")
        .intersection(&ours)
        .cloned()
        .collect();
    assert!(log.is_empty(), "eddy-log depends on {log:?}");
    for (a, b) in [
        ("eddy-stream-store", "eddy-event-store"),
        ("eddy-event-store", "eddy-stream-store"),
    ] {
        assert!(!closure(&meta, a).contains(b), "{a} depends on {b}");
    }
}

#[test]
fn nothing_depends_on_bins_or_xtask() {
    let meta = metadata();
    // The packages under bins/ and xtask/ are leaves: nothing may build on them, except that the
    // real-process tests build the binary's own entry point (the `eddy` library: the command
    // line) into their test server.
    let leaves: BTreeSet<String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["source"].is_null())
        .filter(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let dir = manifest.parent().unwrap().strip_prefix(root()).unwrap();
            dir.starts_with("bins") || dir.starts_with("xtask")
        })
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        leaves.contains("eddy") && leaves.contains("xtask"),
        "{leaves:?}"
    );
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let user = names[node["id"].as_str().unwrap()];
        for dep in node["deps"].as_array().unwrap() {
            let name = names[dep["pkg"].as_str().unwrap()];
            if user == "eddy-tests" && name == "eddy" {
                continue;
            }
            assert!(
                !leaves.contains(name),
                "{} depends on {name}",
                names[node["id"].as_str().unwrap()]
            );
        }
    }
}

#[test]
fn every_crate_uses_the_workspace_lint_policy() {
    let meta = metadata();
    for p in meta["packages"].as_array().unwrap() {
        if !p["source"].is_null() {
            continue;
        }
        let manifest = std::fs::read_to_string(p["manifest_path"].as_str().unwrap()).unwrap();
        let normalized: String = manifest.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            normalized.contains("[lints] workspace = true"),
            "{} does not use the workspace lints",
            p["name"]
        );
    }
}

#[test]
fn readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let setup = readme
        .split("## Set up")
        .nth(1)
        .expect("a '## Set up' section")
        .split("\n## ")
        .next()
        .unwrap();
    let commands: Vec<&str> = setup
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("cargo "))
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -p eddy -- serve",
            "cargo test --workspace --locked"
        ],
        "the README's set-up section must hold exactly the two commands"
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.lines()
            .any(|l| l.trim() == "cargo test --workspace --locked"),
        ".ci/run must run the README's test command"
    );
}

#[test]
fn architecture_doc_names_every_crate() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    for c in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = c.unwrap().file_name().into_string().unwrap();
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/ARCHITECTURE.md does not mention `{name}`"
        );
    }
}

#[test]
fn nothing_ships_the_simulator() {
    let meta = metadata();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        if !p["source"].is_null() || name == "eddy-sim" {
            continue;
        }
        assert!(
            !closure(&meta, name).contains("eddy-sim"),
            "{name} depends on the simulator"
        );
    }
}

/// `docs/ARCHITECTURE.md` and every `docs/decisions/*.md`, by their path from the root.
fn architecture_docs() -> Vec<(String, String)> {
    let mut docs = vec!["docs/ARCHITECTURE.md".to_owned()];
    let mut records: Vec<String> = std::fs::read_dir(root().join("docs/decisions"))
        .expect("docs/decisions/")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| std::path::Path::new(name).extension() == Some("md".as_ref()))
        .map(|name| format!("docs/decisions/{name}"))
        .collect();
    records.sort();
    docs.extend(records);
    docs.into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root().join(&path)).unwrap();
            (path, text)
        })
        .collect()
}

/// A backquoted span that names a file or directory of the repository: only letters, digits
/// and `_ . / -`, a `/` inside, not absolute, and ending in `.rs`, `.md`, `.toml` or `/`.
fn is_repo_path(span: &str) -> bool {
    span.contains('/')
        && !span.starts_with('/')
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
        && [".rs", ".md", ".toml", "/"]
            .iter()
            .any(|end| span.ends_with(end))
}

/// Whether `path` exists from the root, from `crates/`, or from some `crates/*/src/`.
fn repo_path_exists(path: &str) -> bool {
    let root = root();
    root.join(path).exists()
        || root.join("crates").join(path).exists()
        || std::fs::read_dir(root.join("crates"))
            .unwrap()
            .any(|c| c.unwrap().path().join("src").join(path).exists())
}

/// The architecture page stays a short map, and where it (or a decision record) names code,
/// the code exists. For `docs/ARCHITECTURE.md` and every `docs/decisions/*.md`:
///
/// * ARCHITECTURE.md has at most 300 lines.
/// * A backquoted repository path (see `is_repo_path`: `crates/eddy-log/src/log/`,
///   `tests/tests/chaos.rs`) exists, read from the repository root, or from `crates/` when it
///   starts with a crate's directory (`eddy-log/src/cipher.rs`), or from any crate's `src/`
///   when written relative to it (`cluster/transport.rs`). Spans with other characters
///   (`<data_dir>/raft/`, `crates/*/tests/`, `eddy_log::Log`) are not paths and not checked.
/// * A relative Markdown link (`[0001](decisions/0001-...md)`) points at a file that exists.
/// * A fuzz target named as `fuzz_targets/NAME` or `cargo xtask fuzz NAME` is
///   `fuzz/fuzz_targets/NAME.rs` (a NAME in capitals, like `TARGET`, is a placeholder).
/// * Every decision record is named `NNNN-short-title.md`, has a `Date: YYYY-MM-DD` line and
///   is listed in ARCHITECTURE.md's index.
#[test]
fn architecture_docs_name_only_what_exists() {
    let docs = architecture_docs();
    let mut problems = Vec::new();

    let lines = docs[0].1.lines().count();
    if lines > 300 {
        problems.push(format!(
            "docs/ARCHITECTURE.md has {lines} lines, more than 300: move detail to a decision \
             record or a crate's docs"
        ));
    }

    for (doc, text) in &docs {
        // Outside fenced blocks, every other piece between backquotes is a code span.
        let prose: String = text.split("```").step_by(2).collect::<Vec<_>>().join(" ");
        for span in prose.split('`').skip(1).step_by(2) {
            if is_repo_path(span) && !repo_path_exists(span) {
                problems.push(format!(
                    "{doc} names `{span}`, which is not in the repository (from the root, \
                     crates/ or a crate's src/)"
                ));
            }
        }

        for target in text.split("](").skip(1).filter_map(|s| s.split(')').next()) {
            let file = target.split('#').next().unwrap();
            if file.is_empty() || file.contains("://") {
                continue;
            }
            let dir = root().join(doc).parent().unwrap().to_path_buf();
            if !dir.join(file).exists() {
                problems.push(format!("{doc} links to {target}, which does not exist"));
            }
        }

        let words: Vec<&str> = text
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
            .collect();
        let mut targets: Vec<&str> = words
            .windows(4)
            .filter(|w| w[..3] == ["cargo", "xtask", "fuzz"])
            .map(|w| w[3])
            .collect();
        for piece in text.split("fuzz_targets/").skip(1) {
            targets.push(
                piece
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .next()
                    .unwrap(),
            );
        }
        for target in targets {
            // `fuzz/fuzz_targets/` names the directory; `TARGET` is a placeholder.
            if !target.chars().any(|c| c.is_ascii_lowercase()) {
                continue;
            }
            if !root()
                .join(format!("fuzz/fuzz_targets/{target}.rs"))
                .exists()
            {
                problems.push(format!(
                    "{doc} names fuzz target `{target}`, but fuzz/fuzz_targets/{target}.rs does not exist"
                ));
            }
        }
    }

    for (doc, text) in &docs[1..] {
        let name = doc.trim_start_matches("docs/decisions/");
        let numbered = name.len() > 8
            && name[..4].chars().all(|c| c.is_ascii_digit())
            && name.as_bytes()[4] == b'-';
        if !numbered {
            problems.push(format!("{doc} is not named NNNN-short-title.md"));
        }
        let dated = text.lines().any(|l| {
            l.strip_prefix("Date: ").is_some_and(|d| {
                d.len() == 10
                    && d.char_indices().all(|(i, c)| {
                        if i == 4 || i == 7 {
                            c == '-'
                        } else {
                            c.is_ascii_digit()
                        }
                    })
            })
        });
        if !dated {
            problems.push(format!("{doc} has no `Date: YYYY-MM-DD` line"));
        }
        if !docs[0].1.contains(&format!("(decisions/{name})")) {
            problems.push(format!(
                "{doc} is missing from the decision records listed in docs/ARCHITECTURE.md"
            ));
        }
    }

    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
