//! `toolgate login`: the person signs in at the tenant's OpenID provider, and the token the gate
//! reads is written to a file only its user can read, then refreshed before it expires.
//!
//! Two ways to sign in: the authorization code grant with PKCE, the provider redirecting the
//! person's browser to a loopback address this command listens on (RFC 8252), or the device
//! authorization grant (RFC 8628), for a machine without a browser. Beside the token file, the
//! file `<token file>.login` (also 0600) keeps what a refresh needs: the issuer, the client, the
//! refresh token. `--refresh` uses it once; `--keep` goes on refreshing until stopped.
//!
//! Every exchange is openidconnect's: discovery, PKCE, the nonce, and the ID token's signature,
//! issuer, audience and times checked against the provider's published keys.

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthenticationFlow, CoreClaimName, CoreClaimType, CoreClient, CoreClientAuthMethod,
    CoreDeviceAuthorizationResponse, CoreErrorResponseType, CoreGrantType, CoreIdTokenVerifier, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJweKeyManagementAlgorithm, CoreResponseMode, CoreResponseType,
    CoreSubjectIdentifierType, CoreTokenResponse,
};
use openidconnect::{
    reqwest, AdditionalProviderMetadata, AuthType, AuthorizationCode, ClientId, CsrfToken, DeviceAuthorizationUrl,
    DeviceCodeErrorResponseType, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge, ProviderMetadata,
    RedirectUrl, RefreshToken, RequestTokenError, Scope, TokenResponse,
};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The provider's discovery document, with the device authorization endpoint when it has one.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct DeviceEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_authorization_endpoint: Option<DeviceAuthorizationUrl>,
}
impl AdditionalProviderMetadata for DeviceEndpoint {}
type Metadata = ProviderMetadata<
    DeviceEndpoint,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// Which of the provider's tokens the gate is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The access token (a JWT for the API audience), as docs/identity.md registers issuers.
    Access,
    /// The ID token (audience: the client id).
    Id,
}

/// What a sign-in asks of the provider.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    pub issuer: String,
    pub client_id: String,
    /// Scopes beside `openid` (offline_access is what most providers want for a refresh token).
    pub scopes: Vec<String>,
    /// Auth0's `audience` parameter: the API the access token is for.
    pub audience: Option<String>,
    pub kind: Kind,
    /// More certificate authorities for the provider's HTTPS (a private CA).
    pub ca_file: Option<PathBuf>,
}

/// The file beside the token: what a refresh needs.
#[derive(Serialize, Deserialize)]
struct Saved {
    request: Request,
    refresh_token: Option<String>,
    /// The token's `iat` and `exp` (Unix seconds).
    issued_at: i64,
    expires_at: i64,
}

/// How the person signs in.
pub enum Flow {
    /// Authorization code with PKCE; the browser comes back to 127.0.0.1. `browser` is what opens
    /// the address (BROWSER); without one the address is only printed.
    Browser { browser: Option<String>, port: u16, wait: Duration },
    /// Device authorization: a code the person types on another device.
    Device { wait: Duration },
}

/// Why a login or refresh ended without a token.
#[derive(Debug)]
pub enum Failure {
    /// The provider or the person said no (access denied, a refresh token no longer valid): sign in again.
    Refused(String),
    /// Anything else: the configuration, the network, a file.
    Error(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused(m) | Failure::Error(m) => f.write_str(m),
        }
    }
}

fn error(context: &str, e: impl std::fmt::Display) -> Failure {
    Failure::Error(format!("{context}: {e}"))
}

/// The state file of a token file.
pub fn state_path(token_file: &Path) -> PathBuf {
    let mut name = token_file.as_os_str().to_owned();
    name.push(".login");
    PathBuf::from(name)
}

/// The HTTP client of every exchange with an OpenID provider (this command's, and the approvals
/// console's): no redirects followed (openidconnect's advice: a redirect is how a request is
/// turned against another address), the Mozilla roots and `ca_file`.
pub(crate) fn provider_http(ca_file: Option<&Path>) -> std::result::Result<reqwest::Client, String> {
    let mut builder =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(Duration::from_secs(30));
    if let Some(path) = ca_file {
        let pem = fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
        for cert in
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| format!("--ca-file {}: {e}", path.display()))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(|e| format!("the HTTP client: {e}"))
}

fn http(request: &Request) -> std::result::Result<reqwest::Client, Failure> {
    provider_http(request.ca_file.as_deref()).map_err(Failure::Error)
}

/// Whether a URL is https, or http to a loopback address (a service on this machine): the only
/// addresses a token or a person's business is sent to.
pub(crate) fn private_in_transit(url: &openidconnect::url::Url) -> bool {
    let loopback = match url.host() {
        Some(openidconnect::url::Host::Ipv4(a)) => a.is_loopback(),
        Some(openidconnect::url::Host::Ipv6(a)) => a.is_loopback(),
        Some(openidconnect::url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    url.scheme() == "https" || (url.scheme() == "http" && loopback)
}

/// An issuer is https, or http on a loopback address only (a provider on this machine).
fn issuer_url(issuer: &str) -> std::result::Result<IssuerUrl, Failure> {
    let url = IssuerUrl::new(issuer.to_string()).map_err(|e| error("--issuer", e))?;
    if private_in_transit(url.url()) {
        Ok(url)
    } else {
        Err(Failure::Error(format!("--issuer {issuer}: an issuer is https (http only on this machine's loopback)")))
    }
}

async fn discover(request: &Request, http: &reqwest::Client) -> std::result::Result<Metadata, Failure> {
    let issuer = issuer_url(&request.issuer)?;
    Metadata::discover_async(issuer, http)
        .await
        .map_err(|e| error(&format!("discovery at {}", request.issuer), chain(&e)))
}

/// An error and its causes, on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// The person signs in; the token goes to `token_file`, the refresh state beside it.
/// Returns the subject the provider vouched for and the token's expiry.
pub async fn sign_in(request: &Request, flow: Flow, token_file: &Path) -> std::result::Result<(String, i64), Failure> {
    let http = http(request)?;
    let metadata = discover(request, &http).await?;
    let device_url = metadata.additional_metadata().device_authorization_endpoint.clone();
    let client = CoreClient::from_provider_metadata(metadata, ClientId::new(request.client_id.clone()), None)
        .set_auth_type(AuthType::RequestBody);
    let scopes: Vec<Scope> = request.scopes.iter().map(|s| Scope::new(s.clone())).collect();
    let (token, (subject, id_times)) = match flow {
        Flow::Device { wait } => {
            let device_url = device_url.ok_or_else(|| {
                Failure::Error(format!(
                    "{} publishes no device_authorization_endpoint: sign in without --device",
                    request.issuer
                ))
            })?;
            let client = client.set_device_authorization_url(device_url);
            let mut ask = client.exchange_device_code().add_scopes(scopes);
            if let Some(audience) = &request.audience {
                ask = ask.add_extra_param("audience", audience);
            }
            let details: CoreDeviceAuthorizationResponse =
                ask.request_async(&http).await.map_err(|e| error("the device authorization request", chain(&e)))?;
            eprintln!(
                "To sign in, open {} and enter the code {}",
                details.verification_uri().as_str(),
                details.user_code().secret()
            );
            if let Some(complete) = details.verification_uri_complete() {
                eprintln!("Or open: {}", complete.secret());
            }
            let token = client
                .exchange_device_access_token(&details)
                .map_err(|e| error("the token endpoint", e))?
                .request_async(&http, tokio::time::sleep, Some(wait))
                .await
                .map_err(|e| match &e {
                    RequestTokenError::ServerResponse(r) => match r.error() {
                        DeviceCodeErrorResponseType::AccessDenied => {
                            Failure::Refused("the sign-in was denied at the provider".into())
                        }
                        DeviceCodeErrorResponseType::ExpiredToken => {
                            Failure::Refused("the code expired before anyone signed in with it".into())
                        }
                        _ => error("the token endpoint", chain(&e)),
                    },
                    _ => error("the token endpoint", chain(&e)),
                })?;
            let verified = verify_id_token(&client.id_token_verifier(), &token, None)?;
            (token, verified)
        }
        Flow::Browser { browser, port, wait } => {
            let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
                .await
                .map_err(|e| error("a loopback port for the redirect", e))?;
            let port = listener.local_addr().map_err(|e| error("a loopback port for the redirect", e))?.port();
            let redirect = RedirectUrl::new(format!("http://127.0.0.1:{port}/callback")).expect("a valid URL");
            let client = client.set_redirect_uri(redirect);
            let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
            let mut authorize = client
                .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
                .add_scopes(scopes)
                .set_pkce_challenge(challenge);
            if let Some(audience) = &request.audience {
                authorize = authorize.add_extra_param("audience", audience);
            }
            let (url, state, nonce) = authorize.url();
            eprintln!("To sign in, open this address in a browser on this machine:\n{url}");
            let mut opened = None;
            if let Some(browser) = browser.filter(|b| !b.trim().is_empty()) {
                match std::process::Command::new(&browser).arg(url.as_str()).spawn() {
                    Ok(child) => opened = Some(child),
                    Err(e) => eprintln!("(could not start the browser {browser}: {e})"),
                }
            }
            let code = tokio::time::timeout(wait, callback(listener, state.secret().clone()))
                .await
                .map_err(|_| Failure::Refused(format!("nobody signed in within {} s", wait.as_secs())))??;
            let token = client
                .exchange_code(AuthorizationCode::new(code))
                .map_err(|e| error("the token endpoint", e))?
                .set_pkce_verifier(verifier)
                .request_async(&http)
                .await
                .map_err(|e| refused_or(e, "the token endpoint"))?;
            if let Some(mut child) = opened {
                let _ = child.try_wait();
            }
            let verified = verify_id_token(&client.id_token_verifier(), &token, Some(&nonce))?;
            (token, verified)
        }
    };
    let saved = keep_token(request, &token, id_times, None, token_file)?;
    Ok((subject, saved))
}

/// The subject and times of the response's ID token, its signature, issuer, audience, nonce and
/// times checked. A sign-in's response must carry one; a refresh's may not.
fn verify_id_token(
    verifier: &CoreIdTokenVerifier<'_>,
    token: &CoreTokenResponse,
    nonce: Option<&Nonce>,
) -> std::result::Result<(String, Option<(i64, i64)>), Failure> {
    let Some(id_token) = token.id_token() else {
        return Err(Failure::Error("the provider's answer has no ID token (is `openid` among its scopes?)".into()));
    };
    let claims = match nonce {
        Some(nonce) => id_token.claims(verifier, nonce),
        None => id_token.claims(verifier, |_: Option<&Nonce>| Ok(())),
    }
    .map_err(|e| error("the provider's ID token", chain(&e)))?;
    Ok((
        claims.subject().as_str().to_string(),
        Some((claims.issue_time().timestamp(), claims.expiration().timestamp())),
    ))
}

fn refused_or<RE: std::error::Error + 'static>(
    e: RequestTokenError<RE, openidconnect::StandardErrorResponse<CoreErrorResponseType>>,
    context: &str,
) -> Failure {
    match &e {
        RequestTokenError::ServerResponse(r) if *r.error() == CoreErrorResponseType::InvalidGrant => Failure::Refused(
            format!("{context}: {}", r.error_description().map(String::as_str).unwrap_or("invalid_grant")),
        ),
        _ => error(context, chain(&e)),
    }
}

/// Waits for the provider's redirect on the loopback listener: the code, once the state matches.
/// A request with another state is answered 400 and waited past.
async fn callback(listener: tokio::net::TcpListener, state: String) -> std::result::Result<String, Failure> {
    use axum::extract::{RawQuery, State};
    use axum::http::StatusCode;
    use axum::response::Html;
    use tokio::sync::mpsc;

    type Sent = std::result::Result<String, Failure>;
    #[derive(Clone)]
    struct Shared {
        state: String,
        tx: mpsc::Sender<Sent>,
    }
    async fn answer(State(shared): State<Shared>, RawQuery(query): RawQuery) -> (StatusCode, Html<&'static str>) {
        let pairs: std::collections::HashMap<String, String> =
            openidconnect::url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
        if pairs.get("state").map(String::as_bytes) != Some(shared.state.as_bytes()) {
            return (StatusCode::BAD_REQUEST, Html("<p>This is not the sign-in toolgate login is waiting for.</p>"));
        }
        let sent = match (pairs.get("code"), pairs.get("error")) {
            (Some(code), None) => Ok(code.clone()),
            (_, Some(error)) => Err(Failure::Refused(format!(
                "the provider answered {error}{}",
                pairs.get("error_description").map(|d| format!(": {d}")).unwrap_or_default()
            ))),
            (None, None) => Err(Failure::Error("the provider's redirect has neither code nor error".into())),
        };
        let ok = sent.is_ok();
        let _ = shared.tx.send(sent).await;
        if ok {
            (StatusCode::OK, Html("<p>Signed in. You can close this window and go back to the terminal.</p>"))
        } else {
            (StatusCode::OK, Html("<p>The sign-in did not complete; the terminal says why.</p>"))
        }
    }
    let (tx, mut rx) = mpsc::channel(1);
    let app = axum::Router::new().route("/callback", axum::routing::get(answer)).with_state(Shared { state, tx });
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let got = rx.recv().await.unwrap_or_else(|| Err(Failure::Error("the loopback listener stopped".into())));
    // The browser has its page (the handler answered before the send completed its turn).
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.abort();
    got
}

/// The `iat` and `exp` of a JWT's payload, read, not verified: the client's own token, fresh from
/// the token endpoint over TLS (verifying it is the gate's business).
fn jwt_times(token: &str) -> Option<(i64, i64)> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some((claims.get("iat").and_then(|v| v.as_i64()).unwrap_or(crate::keys::now()), claims.get("exp")?.as_i64()?))
}

/// Writes the token the gate is given, and the refresh state beside it (both 0600, each replaced
/// whole). The state goes first: a refresh token the provider has rotated is never lost.
fn keep_token(
    request: &Request,
    token: &CoreTokenResponse,
    id_times: Option<(i64, i64)>,
    old_refresh: Option<String>,
    token_file: &Path,
) -> std::result::Result<i64, Failure> {
    let (value, times) = match request.kind {
        Kind::Access => {
            let access = token.access_token().secret().clone();
            let times = jwt_times(&access).ok_or_else(|| {
                Failure::Error(
                    "the provider's access token is not a JWT with an expiry: ask the provider for one \
                     (Auth0: --audience) or give the gate the ID token (--id-token)"
                        .into(),
                )
            })?;
            (access, times)
        }
        Kind::Id => {
            let id = token.id_token().ok_or_else(|| Failure::Error("the provider's answer has no ID token".into()))?;
            (id.to_string(), id_times.ok_or_else(|| Failure::Error("the ID token was not verified".into()))?)
        }
    };
    let saved = Saved {
        request: request.clone(),
        // A provider that does not rotate answers without a refresh token: the old one still serves.
        refresh_token: token.refresh_token().map(|r| r.secret().clone()).or(old_refresh),
        issued_at: times.0,
        expires_at: times.1,
    };
    let state = serde_json::to_vec_pretty(&saved).map_err(|e| error("the login state", e))?;
    write_private(&state_path(token_file), &state)?;
    write_private(token_file, value.as_bytes())?;
    Ok(saved.expires_at)
}

/// Replaces `path` whole with a file only its owner can read or write.
fn write_private(path: &Path, data: &[u8]) -> std::result::Result<(), Failure> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| Failure::Error(format!("{}: not a file name", path.display())))?;
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    let fail = |e: std::io::Error| error(&path.display().to_string(), e);
    let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        fail(e)
    })?;
    let written = file.write_all(data).and_then(|_| file.sync_all()).and_then(|_| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

fn load(token_file: &Path) -> std::result::Result<Saved, Failure> {
    let path = state_path(token_file);
    let meta = fs::metadata(&path)
        .map_err(|e| error(&format!("{} (written by toolgate login; sign in first)", path.display()), e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(Failure::Error(format!(
            "{} holds a refresh token and its group or others may read it: chmod 600 it, or sign in again",
            path.display()
        )));
    }
    let bytes = fs::read(&path).map_err(|e| error(&path.display().to_string(), e))?;
    serde_json::from_slice(&bytes).map_err(|e| error(&path.display().to_string(), e))
}

/// When a token is due for a refresh: `before` seconds ahead of its expiry, by default a third of
/// its lifetime (at least a minute).
fn due_at(saved: &Saved, before: Option<i64>) -> i64 {
    let lifetime = (saved.expires_at - saved.issued_at).max(0);
    saved.expires_at - before.unwrap_or((lifetime / 3).max(60))
}

/// What a refresh did.
pub enum Refreshed {
    /// The token was not due; it expires at this time.
    NotDue(i64),
    /// A new token was written; it expires at this time.
    Written(i64),
}

/// Refreshes the token of `token_file` if it is due (or `before` seconds ahead of its expiry).
pub async fn refresh(token_file: &Path, before: Option<i64>) -> std::result::Result<Refreshed, Failure> {
    let saved = load(token_file)?;
    if crate::keys::now() < due_at(&saved, before) {
        return Ok(Refreshed::NotDue(saved.expires_at));
    }
    let Some(refresh_token) = saved.refresh_token.clone() else {
        return Err(Failure::Refused("the provider gave no refresh token (ask for offline_access?)".into()));
    };
    let request = &saved.request;
    let http = http(request)?;
    let metadata = discover(request, &http).await?;
    let client = CoreClient::from_provider_metadata(metadata, ClientId::new(request.client_id.clone()), None)
        .set_auth_type(AuthType::RequestBody);
    let refresh_token = RefreshToken::new(refresh_token);
    let token = client
        .exchange_refresh_token(&refresh_token)
        .map_err(|e| error("the token endpoint", e))?
        .request_async(&http)
        .await
        .map_err(|e| refused_or(e, "the provider refused the refresh token"))?;
    let id_times = match token.id_token() {
        Some(_) => verify_id_token(&client.id_token_verifier(), &token, None)?.1,
        None => None,
    };
    let expires = keep_token(request, &token, id_times, Some(refresh_token.secret().clone()), token_file)?;
    Ok(Refreshed::Written(expires))
}

/// Refreshes before each expiry until stopped; returns only when the provider refuses (or the
/// token expires while it cannot be reached).
pub async fn keep(token_file: &Path, before: Option<i64>) -> Failure {
    loop {
        let saved = match load(token_file) {
            Ok(s) => s,
            Err(f) => return f,
        };
        let wait = due_at(&saved, before) - crate::keys::now();
        if wait > 0 {
            tokio::time::sleep(Duration::from_secs(wait as u64)).await;
        }
        match refresh(token_file, before).await {
            Ok(Refreshed::Written(expires)) => {
                eprintln!("toolgate login: refreshed; the token expires at {}", when(expires))
            }
            Ok(Refreshed::NotDue(_)) => {}
            Err(Failure::Refused(m)) => return Failure::Refused(m),
            Err(Failure::Error(m)) => {
                if crate::keys::now() >= saved.expires_at {
                    return Failure::Error(format!("{m}; the token has expired meanwhile"));
                }
                eprintln!("toolgate login: {m}; trying again in 10 s");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
    }
}

/// A Unix time as RFC 3339 (UTC).
pub fn when(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0).map(|d| d.to_rfc3339()).unwrap_or_else(|| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuers_are_https_or_loopback() {
        assert!(issuer_url("https://sso.example/realms/erp").is_ok());
        assert!(issuer_url("http://127.0.0.1:8080/realms/erp").is_ok());
        assert!(issuer_url("http://[::1]:8080/").is_ok());
        assert!(issuer_url("http://localhost:8080/").is_ok());
        for bad in ["http://sso.example/", "http://10.0.0.1/", "ftp://sso.example/", "not a url"] {
            assert!(issuer_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_refresh_is_due_a_third_of_the_lifetime_ahead() {
        let saved = |iat, exp| Saved {
            request: Request {
                issuer: "https://i".into(),
                client_id: "c".into(),
                scopes: vec![],
                audience: None,
                kind: Kind::Access,
                ca_file: None,
            },
            refresh_token: None,
            issued_at: iat,
            expires_at: exp,
        };
        assert_eq!(due_at(&saved(0, 3000), None), 2000);
        assert_eq!(due_at(&saved(0, 90), None), 30, "at least a minute ahead");
        assert_eq!(due_at(&saved(0, 3000), Some(10)), 2990);
    }

    #[test]
    fn private_files_are_0600_and_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("toolgate-login-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"new").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        fs::remove_dir_all(&dir).unwrap();
    }
}
