//! The functions as Lambda runs them: a runtime API emulator, a pool of function processes,
//! `invoke`, and an HTTP front. (Work in progress.)
