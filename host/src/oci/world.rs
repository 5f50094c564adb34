//! A component's world as its bytes declare it (the names it imports and exports), for the `component` block of a Wasm artifact's config.

use wasmparser::{Parser, Payload};

/// The names a component imports and exports at its top level, in the order it declares them
/// (`wasi:io/streams@0.2.6`, `steward:plugin/api@0.1.0`, a bare function name, …): what
/// `wit-component` decodes as the component's world.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct World {
    /// The imported names.
    pub imports: Vec<String>,
    /// The exported names.
    pub exports: Vec<String>,
}

/// The world of `bytes`, when they are a WebAssembly component; `None` for a core module or
/// anything that does not parse (nothing here validates the component: loading it does).
pub fn of_component(bytes: &[u8]) -> Option<World> {
    let mut world = World::default();
    // Nested modules and components come inline, each closed by its own `End`.
    let mut depth = 0usize;
    let mut component = false;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            Payload::Version { encoding, .. } if depth == 0 => {
                component = encoding == wasmparser::Encoding::Component;
                if !component {
                    return None;
                }
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            }
            Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    world.imports.push(import.ok()?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(reader) if depth == 0 => {
                for export in reader {
                    world.exports.push(export.ok()?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    component.then_some(world)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_or_garbage_has_no_world() {
        assert_eq!(of_component(b"\0asm\x01\0\0\0"), None);
        assert_eq!(of_component(b"not wasm"), None);
        // An empty component (version 0x0d, layer 1) imports and exports nothing.
        assert_eq!(of_component(b"\0asm\x0d\0\x01\0"), Some(World::default()));
    }
}
