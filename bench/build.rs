//! The bench's build script: lays out a release binary's text as the host's is (it runs the
//! host as itself, so its figures are the host's).

#[path = "../host/build/text_order.rs"]
mod text_order;

fn main() {
    text_order::link("../host/text-order.txt");
}
