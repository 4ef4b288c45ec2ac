//! Integration tests: one binary, one module per area.

mod actors;
mod bucket_check;
mod chaos;
mod cluster;
mod cold;
mod cold_faults;
mod common;
mod config;
mod crash;
mod damage;
mod density;
mod embedded_cluster;
mod fuzz;
mod http;
mod http_errors;
mod leases;
mod metrics;
mod openapi;
mod replication;
mod retention;
mod retention_alarm;
mod retention_sweep;
mod scrub;
mod server;
mod store;
mod tls;
