//! Where the Go plugin's cache file of an attachment may be ([`dirs`], read by DEL and
//! CHECK of a Go attachment in [`super::upgrade`]), and the Go plugin's attachment
//! holding a VF ([`holder_of`], through the directories' index [`super::go_index`]),
//! asked by ADD (a VF held by a Go attachment) and by our teardown (a Go file gone since
//! a rollback).

use super::Ctx;
use crate::gocache::{self, GoAttachment};
use std::path::{Path, PathBuf};

/// Where a Go cache of this attachment may be: the configured `stateDir` (the Go
/// plugin's own directory was the default of earlier versions), `goCacheDir` and the
/// Go plugin's fixed directory, each once.
pub(super) fn dirs(ctx: &Ctx) -> Vec<PathBuf> {
    let mut d = vec![ctx.conf.state_dir.clone()];
    for go in [
        ctx.conf.go_cache_dir.clone(),
        Some(PathBuf::from(gocache::GO_CACHE_DIR)),
    ]
    .into_iter()
    .flatten()
    {
        if !d.contains(&go) {
            d.push(go);
        }
    }
    d
}

/// The attachment holding VF `vf` that a Go cache file records, in a directory the Go
/// plugin writes: `goCacheDir` and the Go plugin's fixed directory (the stateDir too
/// when it is one of them; the Go plugin writes nowhere else, `config.DefaultCNIDir`).
/// Either one the Go plugin wrote, or one our ADD wrote in this boot that our own
/// records no longer know (the caller found no journal of ours holding the VF, so that
/// file is all that is left of an attachment whose journal went with its `stateDir`).
/// Found through each directory's index ([`super::go_index`]): a node's own rollback
/// files are not read again at every ADD.
pub(super) fn holder_of(ctx: &Ctx, vf: crate::types::PciAddress) -> Option<GoAttachment> {
    let go: Vec<PathBuf> = dirs(ctx)
        .into_iter()
        .filter(|d| {
            Some(d) == ctx.conf.go_cache_dir.as_ref()
                || d.as_path() == Path::new(gocache::GO_CACHE_DIR)
        })
        .collect();
    super::go_index::holder(ctx.store.dir(), &go, vf)
}
