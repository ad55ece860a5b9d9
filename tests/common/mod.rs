//! Shared test support. Use from an integration test with `mod common;` and
//! `use common::emuhost::{EmuHost, EmuOptions};`.
#![allow(dead_code)]

pub mod emuhost;
pub mod exec;
pub mod failpoints;
pub mod fixture;
pub mod gofix;
pub mod guid;
pub mod lab;
pub mod libcni;
pub mod policy;
pub mod prometheus;
pub mod reaped;
pub mod rng;
pub mod script;
