//! The named fail points of ADD and DEL (src/failpoint.rs; a test build takes
//! `IB_SRIOV_FAILPOINTS=<point>=kill|error`), in execution order, for the suites that
//! kill or fail the plugin at each of them.

/// ADD's fail points that an emulated netdev VF with GUID, link state, device-info file
/// and IPAM reaches, in execution order. `add.rdma` needs an RDMA subsystem
/// (tests/rdma_orchestration.rs covers its failure).
pub const ADD_POINTS: [&str; 9] = [
    "add.journal",
    "add.link_state",
    "add.guid",
    "add.rebind",
    "add.device_info",
    "add.move",
    "add.ipam",
    "add.addresses",
    "add.complete",
];

/// DEL's fail points of a journaled teardown, in execution order.
pub const DEL_POINTS: [&str; 5] = [
    "del.ipam",
    "del.move",
    "del.guid",
    "del.link_state",
    "del.journal",
];

/// DEL's recovery rebind of a VF whose netdev did not come back to the host (reached
/// only then; src/plugin/steps/netdev_move.rs `recover_by_rebind`).
pub const DEL_RECOVERY_POINT: &str = "del.recovery_rebind";
