//! The host's build script: lays out a release binary's text by `text-order.txt` and packs its
//! relative relocations.

#[path = "build/relr.rs"]
mod relr;
#[path = "build/text_order.rs"]
mod text_order;

fn main() {
    text_order::link("text-order.txt");
    relr::link();
}
