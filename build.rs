//! Release builds of the `ccmesh` binary place the functions a request runs through first and
//! together (`src/link_order.rs` says when and why).

#[path = "src/link_order.rs"]
mod link_order;

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=link/hot_functions.txt");
    println!("cargo:rerun-if-changed=src/link_order.rs");
    let var = |name: &str| env::var(name).unwrap_or_default();
    let list = format!("{}/link/hot_functions.txt", var("CARGO_MANIFEST_DIR"));
    let exists = std::path::Path::new(&list).exists();
    let (profile, target, rustflags) = (var("PROFILE"), var("TARGET"), var("CARGO_ENCODED_RUSTFLAGS"));
    let build =
        link_order::Build { profile: &profile, target: &target, rustflags: &rustflags, list: exists.then_some(&list) };
    for arg in link_order::link_args(&build) {
        println!("cargo:rustc-link-arg-bin=ccmesh={arg}");
    }
}
