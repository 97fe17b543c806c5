//! Generates the CSI and plugin-registration code from `proto/*.proto` with
//! protox (pure Rust: no protoc on the machine) and tonic-prost-build.
//!
//! Messages with a `secrets` field (the CSI spec marks every one of them
//! `csi_secret`) get no derived `Debug`; `src/redact.rs` implements a `Debug`
//! for them that never prints the secrets.

use std::fmt::Write as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/csi.proto", "proto/pluginregistration.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;

    let mut secret_holders = Vec::new();
    let mut redacting = String::new();
    for file in &fds.file {
        let package = file.package();
        for message in &file.message_type {
            if !message.field.iter().any(|f| f.name() == "secrets") {
                continue;
            }
            secret_holders.push(format!(".{package}.{}", message.name()));
            let name = message.name();
            writeln!(
                redacting,
                "impl ::core::fmt::Debug for {name} {{\n    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {{\n        f.debug_struct(\"{name}\")"
            )?;
            for field in &message.field {
                let field = field.name();
                let value = if field == "secrets" {
                    "&crate::redact::Redacted(&self.secrets)".to_string()
                } else {
                    format!("&self.{field}")
                };
                writeln!(redacting, "            .field(\"{field}\", {value})")?;
            }
            writeln!(redacting, "            .finish()\n    }}\n}}")?;
        }
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("csi_redacted_debug.rs"), redacting)?;
    tonic_prost_build::configure()
        .build_transport(false)
        .generate_default_stubs(true)
        .codec_path("crate::codec::CsiCodec")
        .skip_debug(secret_holders)
        .compile_fds(fds)?;
    Ok(())
}
