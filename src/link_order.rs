//! When a release build of the `ccmesh` binary asks the linker to place the functions a request
//! runs through first and together (`link/hot_functions.txt`, written by `bench/hot_functions`).
//! After a pause between requests their code has left the core's caches and is fetched again;
//! laid out together it comes from ~155 pages instead of ~235, and the request after a pause
//! costs less (BENCHMARKS.md, "the code a request runs"). Only the layout changes, no instruction.
//!
//! Used by `build.rs`; compiled into the library only for its tests.

/// What the build is, as Cargo tells a build script.
pub struct Build<'a> {
    /// `PROFILE`: "release" for release builds and the profiles that inherit from it.
    pub profile: &'a str,
    /// `TARGET`.
    pub target: &'a str,
    /// `CARGO_ENCODED_RUSTFLAGS` (flags separated by 0x1f).
    pub rustflags: &'a str,
    /// The list's path, when the file exists.
    pub list: Option<&'a str>,
}

/// The linker arguments for the `ccmesh` binary. The option is LLD's (and mold's); LLD is the
/// toolchain's own linker on x86-64 Linux, so only that target gets it, and not a build whose
/// RUSTFLAGS choose a linker of their own (GNU ld would refuse the option). Debug and test builds
/// link as usual.
pub fn link_args(build: &Build<'_>) -> Vec<String> {
    let own_linker = build.rustflags.contains("linker") || build.rustflags.contains("fuse-ld");
    match build.list {
        Some(list) if build.profile == "release" && build.target == "x86_64-unknown-linux-gnu" && !own_linker => vec![
            format!("-Wl,--symbol-ordering-file={list}"),
            // A name the binary no longer has (a dependency upgraded since the list was written)
            // is skipped; `bench/hot_functions --check` says how many are left.
            "-Wl,--no-warn-symbol-ordering".to_owned(),
        ],
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    const LIST: &str = "/src/ccmesh/link/hot_functions.txt";

    fn release() -> Build<'static> {
        Build { profile: "release", target: "x86_64-unknown-linux-gnu", rustflags: "", list: Some(LIST) }
    }

    #[test]
    fn a_release_build_for_x86_64_linux_orders_the_listed_functions() {
        assert_eq!(
            link_args(&release()),
            [format!("-Wl,--symbol-ordering-file={LIST}"), "-Wl,--no-warn-symbol-ordering".to_owned()]
        );
        let flags = "-Ctarget-cpu=native\x1f-Cforce-frame-pointers=yes";
        assert_eq!(link_args(&Build { rustflags: flags, ..release() }).len(), 2);
    }

    #[test]
    fn other_builds_link_as_usual() {
        for build in [
            Build { profile: "debug", ..release() },
            Build { target: "aarch64-unknown-linux-gnu", ..release() },
            Build { target: "x86_64-apple-darwin", ..release() },
            Build { list: None, ..release() },
            Build { rustflags: "-Clinker=clang\x1f-Clink-arg=-fuse-ld=bfd", ..release() },
            Build { rustflags: "-Clink-arg=-fuse-ld=bfd", ..release() },
            Build { rustflags: "-Clinker-features=-lld", ..release() },
        ] {
            assert!(link_args(&build).is_empty(), "{} {} {:?}", build.profile, build.target, build.rustflags);
        }
    }

    /// The list holds linker symbol names, one per line, and the request path's entry points for
    /// both builds it serves (`bench/hot_functions`: the gateway alone, and with the examples).
    #[test]
    fn the_list_names_the_request_path_for_both_builds() {
        let text = include_str!("../link/hot_functions.txt");
        let names: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
        assert!(names.len() > 200, "{} names", names.len());
        for name in &names {
            assert!(
                !name.contains(char::is_whitespace) && name.chars().all(|c| c.is_ascii_graphic()),
                "not a symbol name: {name:?}"
            );
        }
        for entry in ["6server16serve_connection", "5proxy6handle", "5proxy7prepare", "relay..Relay"] {
            let builds = names.iter().filter(|n| n.contains(entry) && n.starts_with("_ZN")).count();
            assert!(builds >= 2, "{entry}: in {builds} of the two builds' lists");
        }
    }
}
