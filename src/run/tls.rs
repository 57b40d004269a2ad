//! Which TLS certificates the run's clients accept.

use color_eyre::eyre::{bail, eyre, Result, WrapErr};

use super::plan::SweepPlan;

/// Which TLS certificates every client of a run accepts: the Mozilla roots, plus
/// `--cacert`'s, or anything at all under `--insecure`.
pub(super) struct TlsTrust {
    insecure: bool,
    extra_roots: Vec<reqwest::Certificate>,
}

impl TlsTrust {
    pub(super) fn of(plan: &SweepPlan) -> Result<TlsTrust> {
        let extra_roots = match &plan.cacert {
            Some(path) => {
                let pem = std::fs::read(path)
                    .wrap_err_with(|| format!("cannot read --cacert {}", path.display()))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                    eyre!(
                        "--cacert {}: not a PEM certificate file ({})",
                        path.display(),
                        innermost(&e)
                    )
                })?;
                if certs.is_empty() {
                    bail!(
                        "--cacert {}: no certificate in it (expected PEM, -----BEGIN CERTIFICATE-----)",
                        path.display()
                    );
                }
                // PEM armour around bytes that are not X.509 passes the parse above and
                // fails only when a client is built, in words about a "peer" certificate:
                // try each one here, so the error names the file and the certificate.
                let count = certs.len();
                for (index, cert) in certs.iter().enumerate() {
                    if let Err(e) = reqwest::Client::builder()
                        .add_root_certificate(cert.clone())
                        .build()
                    {
                        bail!(
                            "--cacert {}: certificate {} of {count} is not a valid X.509 certificate ({})",
                            path.display(),
                            index + 1,
                            innermost(&e)
                        );
                    }
                }
                certs
            }
            None => Vec::new(),
        };
        Ok(TlsTrust {
            insecure: plan.insecure,
            extra_roots,
        })
    }

    pub(super) fn apply(&self, mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        for cert in &self.extra_roots {
            builder = builder.add_root_certificate(cert.clone());
        }
        builder.danger_accept_invalid_certs(self.insecure)
    }
}

/// The most specific message in an error's chain (reqwest's own says only
/// "builder error").
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}
