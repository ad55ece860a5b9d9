//! Step `LinkState`: the VF's link-state policy (auto/enable/disable), set through the
//! PF (`IFLA_VF_LINK_STATE`, include/uapi/linux/if_link.h) or the MLNX_OFED
//! `sriov/<N>/policy` file, whichever ADD read it through.

use super::{Apply, StepFailure};
use crate::cni::CniError;
use crate::failpoint::hit;
use crate::journal::{Journal, Via};
use crate::plugin::vfattr::PfView;
use crate::types::LinkState;

/// Sets the VF's link state to `want` through `via` (ADD).
pub(super) fn apply(
    cx: &Apply,
    j: &Journal,
    want: LinkState,
    via: Option<Via>,
) -> Result<(), StepFailure> {
    let used = cx.view.set_link_state(want, via)?;
    log::info!("VF {} link state set to {want} via {used:?}", j.vf);
    hit("add.link_state")?;
    Ok(())
}

/// Restores the original link state (auto when it was unknown); nothing when the VF
/// already has it.
pub(super) fn undo(
    view: &PfView,
    j: &Journal,
    orig: Option<LinkState>,
    via: Option<Via>,
) -> Result<(), CniError> {
    let want = orig.unwrap_or_else(|| {
        log::warn!("original link state of VF {} unknown; restoring auto", j.vf);
        LinkState::Auto
    });
    // Already original (the set never happened, e.g. the driver refused it, or a
    // previous DEL restored it): no set, which such a driver would refuse as well.
    let current = view.read().ok().and_then(|st| st.link_state).map(|s| s.0);
    if current == Some(want) {
        log::debug!("VF {} link state is already {want}", j.vf);
        return Ok(());
    }
    view.set_link_state(want, via)?;
    log::info!("VF {} link state restored to {want}", j.vf);
    Ok(())
}
