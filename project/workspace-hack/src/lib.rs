//! Intentionally empty: this crate exists only for its `Cargo.toml`, which gives tokio, hyper,
//! hyper-util, hyper-rustls, regex, idna and libc one feature set in every build (see there why).
