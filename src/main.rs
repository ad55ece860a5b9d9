//! `ib-sriov`: the CNI executable. All logic lives in the library; see `cli::main`.

fn main() {
    std::process::exit(ib_sriov_cni::cli::main());
}
