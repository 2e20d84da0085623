//! The listener's TLS (`--tls-cert`, `--tls-key`): rustls with the ring provider, HTTP/1.1 by
//! ALPN, and the certificate read again on SIGHUP or when either file changes (checked every
//! few seconds), so a renewed certificate is served without a restart. A file that cannot be read
//! or a key that does not match keeps the one in service, and says why on standard error.

use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::ListenerTls;

/// How often the files' modification times are looked at.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// rustls' configuration of the certificate chain and key in `files`.
pub fn server_config(files: &ListenerTls) -> Result<ServerConfig, String> {
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--tls-cert {}: {e}", files.cert.display()))?;
    if chain.is_empty() {
        return Err(format!("--tls-cert {}: no certificate in the file", files.cert.display()));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| format!("--tls-key {}: {e}", files.key.display()))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("--tls-cert and --tls-key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn modified(files: &ListenerTls) -> Option<(SystemTime, SystemTime)> {
    let at = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((at(&files.cert)?, at(&files.key)?))
}

/// Serve the files' certificate anew after SIGHUP or a change of either file; runs until the
/// process ends.
pub async fn reload(files: ListenerTls, config: RustlsConfig) {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut seen = modified(&files);
    loop {
        let signalled = tokio::select! {
            _ = tokio::time::sleep(WATCH_EVERY) => false,
            _ = async { match hangup.as_mut() { Some(h) => { h.recv().await; } None => std::future::pending().await } } => true,
        };
        let now = modified(&files);
        if !signalled && now == seen {
            continue;
        }
        seen = now;
        match server_config(&files) {
            Ok(fresh) => {
                config.reload_from_config(Arc::new(fresh));
                tracing::info!("the listener's certificate was read again");
            }
            Err(e) => tracing::warn!("the listener's certificate was not replaced: {e}"),
        }
    }
}
