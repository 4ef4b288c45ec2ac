//! Integration tests: one binary, one module per area.

mod common;
mod config;
mod server;
mod store;
