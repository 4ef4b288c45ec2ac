//! Integration tests: one binary, one module per area.

mod actors;
mod cold;
mod common;
mod config;
mod leases;
mod retention;
mod server;
mod store;
