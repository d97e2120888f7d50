//! Reports: the prose is in `templates/*.md`; Rust computes the figures and renders them with
//! minijinja. (Work in progress.)
