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
    "eddy-client",
    "eddy-ctl",
    "eddy-server",
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
            // The command line (`eddy_server::cli`) dispatches the client subcommands.
            "eddy-client",
            "eddy-ctl",
        ],
    ),
    // The simulator runs the consensus crate, the real stores under it and the server's own
    // state machines: it sits above the server, as the tests do, and nothing depends on it.
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
            "eddy-server",
            "eddy-client",
            "eddy-ctl",
        ],
    ),
    ("eddy", EVERY_LIBRARY),
    ("eddy-tests", EVERY_LIBRARY),
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
    // The packages under bins/ and xtask/ are leaves: nothing may build on them (the tests
    // reach the server's entry point through eddy-server, not through the binary crate).
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
        for dep in node["deps"].as_array().unwrap() {
            let name = names[dep["pkg"].as_str().unwrap()];
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
            "cargo test --workspace"
        ],
        "the README's set-up section must hold exactly the two commands"
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "cargo test --workspace"),
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
