//! The `ccmesh` binary: parse the command line and run it.

fn main() -> std::process::ExitCode {
    ccmesh::cli::main()
}
