//! Intentionally empty: this crate exists only for its `Cargo.toml`, which gives tokio, hyper,
//! hyper-util, hyper-rustls, regex and idna one feature set in every build (see there why).
