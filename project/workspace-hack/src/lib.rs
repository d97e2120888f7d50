//! Intentionally empty: this crate exists only for its `Cargo.toml`, which gives the heavy
//! dependencies (tokio, hyper, the AWS SDK's smithy crates, serde, libc, …) one feature set in
//! every build; `cargo hakari` generates it (see there why).
