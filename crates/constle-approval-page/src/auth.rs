//! Passwords (Argon2id, PHC strings), session ids and CSRF tokens.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 10;

/// The longest approver user name, in bytes.
pub const MAX_USER_BYTES: usize = 64;

/// Why a password could not be set or checked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// Too short.
    #[error("the password must be at least {MIN_PASSWORD_CHARS} characters")]
    TooShort,
    /// The operating system's random source failed.
    #[error("the operating system's random source failed")]
    Random,
    /// Argon2 refused.
    #[error("password hashing failed: {0}")]
    Hash(String),
    /// Reading the password from the terminal failed.
    #[error("reading the password: {0}")]
    Io(#[from] std::io::Error),
}

/// The Argon2id PHC string of `password`, with a fresh random salt and the
/// crate's default (OWASP-recommended) cost.
///
/// # Errors
///
/// [`AuthError`] if the password is too short or hashing fails.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(AuthError::TooShort);
    }
    let salt =
        SaltString::encode_b64(&random::<16>()?).map_err(|err| AuthError::Hash(err.to_string()))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|err| AuthError::Hash(err.to_string()))?
        .to_string())
}

/// Whether `password` matches the PHC string `phc`.
pub fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// `N` bytes from the operating system's random source.
///
/// # Errors
///
/// [`AuthError::Random`] if it fails.
pub fn random<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|_| AuthError::Random)?;
    Ok(bytes)
}

/// A new random token, 256 bits as 64 hex digits: a session id or a CSRF
/// token.
///
/// # Errors
///
/// [`AuthError::Random`] if the random source fails.
pub fn new_token() -> Result<String, AuthError> {
    Ok(hex::encode(random::<32>()?))
}

/// What the database keeps of a session id: its SHA-256, so that reading the
/// database does not hand out live sessions.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Compares two strings in time that depends only on their lengths, so a
/// CSRF token cannot be guessed a byte at a time.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Reads one line from `input`, without its line ending, as the password.
///
/// # Errors
///
/// [`AuthError::Io`] if reading fails.
pub fn read_password_line(
    input: &mut impl std::io::BufRead,
) -> Result<Zeroizing<String>, AuthError> {
    let mut line = Zeroizing::new(String::new());
    input.read_line(&mut line)?;
    let trimmed = line.trim_end_matches(['\n', '\r']).len();
    line.truncate(trimmed);
    Ok(line)
}

/// Asks for a new password twice on the controlling terminal, with echo
/// off.
///
/// # Errors
///
/// [`AuthError::Io`] if there is no terminal or the two answers differ.
#[cfg(unix)]
pub fn prompt_new_password() -> Result<Zeroizing<String>, AuthError> {
    use std::io::{BufReader, Write as _};

    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};

    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")?;
    let saved = tcgetattr(&tty).map_err(std::io::Error::from)?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    quiet.local_flags.insert(LocalFlags::ECHONL);
    tcsetattr(&tty, SetArg::TCSAFLUSH, &quiet).map_err(std::io::Error::from)?;
    let answers = (|| -> Result<_, AuthError> {
        let mut out = &tty;
        let mut input = BufReader::new(&tty);
        out.write_all(b"new approver password: ")?;
        let first = read_password_line(&mut input)?;
        out.write_all(b"again: ")?;
        let second = read_password_line(&mut input)?;
        Ok((first, second))
    })();
    // Echo comes back whatever happened.
    tcsetattr(&tty, SetArg::TCSAFLUSH, &saved).map_err(std::io::Error::from)?;
    let (first, second) = answers?;
    if *first != *second {
        return Err(AuthError::Io(std::io::Error::other(
            "the two passwords differ",
        )));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_hash_is_argon2id_and_verifies() -> Result<(), AuthError> {
        let phc = hash_password("correct horse battery")?;
        assert!(phc.starts_with("$argon2id$v=19$"), "{phc}");
        assert!(verify_password("correct horse battery", &phc));
        assert!(!verify_password("correct horse batterY", &phc));
        assert!(!verify_password("x", "not a phc string"));
        assert!(matches!(hash_password("short"), Err(AuthError::TooShort)));
        Ok(())
    }

    #[test]
    fn tokens_are_256_bits_and_compared_whole() -> Result<(), AuthError> {
        let (a, b) = (new_token()?, new_token()?);
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(same_token(&a, &a.clone()));
        assert!(!same_token(&a, &b));
        assert!(!same_token(&a, &a[..63]));
        assert_eq!(hash_token(&a).len(), 64);
        Ok(())
    }
}
