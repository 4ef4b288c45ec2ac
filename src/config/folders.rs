//! Whether the folders the server writes (`storage.data_dir`, and `cold.dir` for a folder cold
//! tier) can be created and written: the check behind
//! [`Config::check_folders`](super::Config::check_folders).

use std::path::Path;

use super::ConfigError;

/// Checks that `folder` is a folder this process may write, or can be created as one: the
/// nearest of its ancestors that exists is a folder this process may write.
pub(super) fn writable_folder(key: &str, folder: &Path) -> Result<(), ConfigError> {
    let refuse = |at: &Path, why: String| {
        let message = if at == folder {
            format!("{} {why}", folder.display())
        } else {
            format!("cannot create {}: {} {why}", folder.display(), at.display())
        };
        Err(ConfigError::invalid(key, message))
    };
    for at in folder.ancestors() {
        // The ancestors of a relative path end with "": the working folder.
        let at = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            at
        };
        match std::fs::metadata(at) {
            Ok(metadata) if metadata.is_dir() => {
                return match may_write(at) {
                    Ok(()) => Ok(()),
                    Err(err) => refuse(at, format!("is not writable ({err})")),
                };
            }
            Ok(_) => return refuse(at, "is not a folder".to_owned()),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(err) => return refuse(at, format!("cannot be read ({err})")),
        }
    }
    refuse(folder, "has no existing folder above it".to_owned())
}

/// Whether this process may create entries in the folder `dir`, asked of the operating system
/// without writing anything.
#[cfg(unix)]
fn may_write(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the path holds a NUL byte"))?;
    // SAFETY: `access` only reads the NUL-terminated path, which outlives the call.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether this process may create entries in the folder `dir`: its read-only flag.
#[cfg(not(unix))]
fn may_write(dir: &Path) -> std::io::Result<()> {
    if std::fs::metadata(dir)?.permissions().readonly() {
        Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    } else {
        Ok(())
    }
}
