//! The host's build script: lays out a release binary's text by `text-order.txt`.

#[path = "build/text_order.rs"]
mod text_order;

fn main() {
    text_order::link("text-order.txt");
}
