//! The host disk that holds the volumes, and the files or block devices of volumes that
//! have their own (`path`): opening (or creating) them, their size, and the alignment
//! O_DIRECT demands.

use crate::config::DeviceConfig;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("device.path {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("device.path {0}: does not exist (set device.create_size to create it)")]
    Missing(PathBuf),
    /// A volume's own file or block device (`path`) could not be used.
    #[error("{key} {path}: {what}")]
    Volume {
        key: String,
        path: PathBuf,
        what: String,
    },
}

/// The opened host disk. `file` is `None` for the null device.
#[derive(Debug)]
pub struct HostDisk {
    pub file: Option<File>,
    pub path: Option<PathBuf>,
    /// Bytes usable by volumes.
    pub size: u64,
    /// The smallest offset and length granularity for I/O (the logical block size under
    /// O_DIRECT; 512 otherwise). Volumes and the guest-visible block size follow it.
    pub block_size: u64,
    /// The alignment guest buffers need for zero-copy O_DIRECT; 1 without O_DIRECT.
    pub mem_align: u64,
    pub direct: bool,
}

/// The null device's size: `create_size`, or as large as offsets go.
fn null_size(cfg: &DeviceConfig) -> u64 {
    cfg.create_size.map_or(u64::MAX, |s| s.0)
}

impl HostDisk {
    pub fn open(cfg: &DeviceConfig) -> Result<Self, DiskError> {
        if !cfg.kind.has_file() {
            return Ok(HostDisk {
                file: None,
                path: None,
                size: null_size(cfg),
                block_size: 512,
                mem_align: 1,
                direct: false,
            });
        }
        let path = cfg
            .path
            .clone()
            .expect("validated: file devices have a path");
        create_if_missing(cfg)?;
        Self::open_file(path, cfg.direct).map_err(|(path, what, source)| DiskError::Io {
            path,
            what,
            source,
        })
    }

    /// A volume's own image file or block device (`path`), created as the device's file is
    /// (`size` bytes, allocated unless `preallocate` is off) if missing; an existing one
    /// must hold `size` bytes, a multiple of its block size.
    pub fn open_volume(
        key: &str,
        path: &Path,
        size: u64,
        device: &DeviceConfig,
    ) -> Result<Self, DiskError> {
        let fail = |what: String| DiskError::Volume {
            key: key.to_string(),
            path: path.to_path_buf(),
            what,
        };
        if !path.exists() {
            create_file(path, size, device.preallocate)
                .map_err(|(what, e)| fail(format!("{what}: {e}")))?;
        }
        let disk = Self::open_file(path.to_path_buf(), device.direct)
            .map_err(|(_, what, e)| fail(format!("{what}: {e}")))?;
        volume_fits(disk.size, disk.block_size, size).map_err(fail)?;
        Ok(HostDisk { size, ..disk })
    }

    /// Checks every volume's own file of `config` as [`HostDisk::probe_volume`] does.
    pub fn probe_volume_files(config: &crate::config::Config) -> Result<(), DiskError> {
        for (i, v) in config.volumes.iter().enumerate() {
            if let Some(path) = &v.path {
                Self::probe_volume(&v.key(i, "path"), path, v.size.0, &config.device)?;
            }
        }
        Ok(())
    }

    /// Checks a volume's own file as [`HostDisk::open_volume`] would, without creating or
    /// modifying anything (for `check`); a missing one would be created.
    pub fn probe_volume(
        key: &str,
        path: &Path,
        size: u64,
        device: &DeviceConfig,
    ) -> Result<(), DiskError> {
        if !path.exists() {
            return Ok(());
        }
        let fail = |what: String| DiskError::Volume {
            key: key.to_string(),
            path: path.to_path_buf(),
            what,
        };
        let file = DeviceConfig {
            path: Some(path.to_path_buf()),
            create_size: None,
            kind: crate::config::DeviceKind::File,
            ..device.clone()
        };
        let (have, block) = Self::probe(&file).map_err(|e| fail(e.to_string()))?;
        volume_fits(have, block, size).map_err(fail)
    }

    /// Opens an existing file or block device for I/O (O_DIRECT if `direct`).
    fn open_file(
        path: PathBuf,
        direct: bool,
    ) -> Result<Self, (PathBuf, &'static str, std::io::Error)> {
        let io_err = |what, source| (path.clone(), what, source);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let mut file = opts.open(&path).map_err(|e| io_err("cannot open", e))?;
        let meta = file.metadata().map_err(|e| io_err("cannot stat", e))?;
        let is_block_device = meta.file_type().is_block_device();
        // Seeking to the end gives the size of regular files and block devices alike.
        let size = file
            .seek(SeekFrom::End(0))
            .map_err(|e| io_err("cannot read size", e))?;
        let (block_size, mem_align) = if direct {
            direct_io_alignment(&file, is_block_device)
        } else {
            (512, 1)
        };
        Ok(HostDisk {
            file: Some(file),
            path: Some(path),
            size,
            block_size,
            mem_align,
            direct,
        })
    }
}

/// A volume of `size` bytes fits a file of `have` bytes with logical blocks of `block`.
fn volume_fits(have: u64, block: u64, size: u64) -> Result<(), String> {
    if have < size {
        return Err(format!(
            "holds {have} bytes, less than the volume's size ({size})"
        ));
    }
    if size % block != 0 {
        return Err(format!(
            "the volume's size ({size}) is not a multiple of its logical block size ({block})"
        ));
    }
    Ok(())
}

/// Create the backing file as a sparse file of `create_size` if `path` does not exist;
/// without `create_size` a missing path is an error.
pub fn create_if_missing(cfg: &DeviceConfig) -> Result<(), DiskError> {
    let Some(path) = cfg.path.as_deref().filter(|_| cfg.kind.has_file()) else {
        return Ok(());
    };
    if path.exists() {
        return Ok(());
    }
    let io_err = |what, source| DiskError::Io {
        path: path.to_path_buf(),
        what,
        source,
    };
    let Some(size) = cfg.create_size else {
        return Err(DiskError::Missing(path.to_path_buf()));
    };
    create_file(path, size.0, cfg.preallocate).map_err(|(what, e)| io_err(what, e))
}

/// Creates `path` (and its directory) as a file of `size` bytes, allocated if
/// `allocate`; nothing is left behind on failure.
fn create_file(
    path: &Path,
    size: u64,
    allocate: bool,
) -> Result<(), (&'static str, std::io::Error)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| ("cannot create directory", e))?;
    }
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| ("cannot create", e))?;
    if let Err(e) = f.set_len(size) {
        let _ = std::fs::remove_file(path);
        return Err(("cannot size", e));
    }
    if allocate {
        if let Err(e) = preallocate(&f, size) {
            // Leave nothing half-made behind: the next start tries again.
            let _ = std::fs::remove_file(path);
            return Err((
                "cannot preallocate (set device.preallocate = false for a sparse file)",
                e,
            ));
        }
        tracing::info!(path = %path.display(), size, "created and allocated the backing file");
    } else {
        tracing::info!(path = %path.display(), size, "created sparse backing file");
    }
    Ok(())
}

/// Allocate `len` bytes of `file` (unwritten extents: fast, and reads still return
/// zeroes).
fn preallocate(file: &File, len: u64) -> std::io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(std::io::Error::other)?;
    // SAFETY: fallocate on a descriptor we own; no memory is passed.
    match unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// (offset/length alignment, memory alignment) for O_DIRECT, from statx(STATX_DIOALIGN)
/// (Linux 6.1+) or BLKSSZGET, falling back to 512 bytes.
fn direct_io_alignment(file: &File, is_block_device: bool) -> (u64, u64) {
    let fd = file.as_raw_fd();
    if is_block_device {
        let mut logical: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one c_int to the pointer we pass, which is valid.
        if unsafe { libc::ioctl(fd, libc::BLKSSZGET, &mut logical) } == 0 && logical >= 512 {
            return (logical as u64, logical as u64);
        }
        return (512, 512);
    }
    // SAFETY: statx is plain old data; zeroed is a valid initial value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    const STATX_DIOALIGN: u32 = 0x2000;
    // SAFETY: fd is open, the empty path with AT_EMPTY_PATH refers to it, and stx is a valid
    // out-pointer for the duration of the call.
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc == 0 && stx.stx_mask & STATX_DIOALIGN != 0 && stx.stx_dio_offset_align != 0 {
        let offset = u64::from(stx.stx_dio_offset_align).max(512);
        let mem = u64::from(stx.stx_dio_mem_align).max(1);
        return (offset, mem);
    }
    (512, 512)
}

impl HostDisk {
    /// What the file is, whatever path named it: `(device, inode)` of a regular file,
    /// `(0, rdev)` of a block device. None without a file.
    pub fn identity(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.file.as_ref()?.metadata().ok()?;
        Some(if meta.file_type().is_block_device() {
            (0, meta.rdev())
        } else {
            (meta.dev(), meta.ino())
        })
    }

    /// Makes `len` bytes at `offset` read as zeroes, on disk when this returns:
    /// BLKZEROOUT on a block device, `FALLOC_FL_ZERO_RANGE` (keeping the allocation) or
    /// else a punched hole on a file.
    pub fn zero_range(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.zero_range_unsynced(offset, len)?;
        match &self.file {
            Some(file) => file.sync_data(),
            None => Ok(()),
        }
    }

    fn zero_range_unsynced(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let fd = file.as_raw_fd();
        if file.metadata()?.file_type().is_block_device() {
            /// `_IO(0x12, 127)`.
            const BLKZEROOUT: libc::c_ulong = 0x127f;
            let range = [offset, len];
            // SAFETY: BLKZEROOUT reads two u64 (start, length) from the pointer, which
            // points at a live array of two.
            return match unsafe { libc::ioctl(fd, BLKZEROOUT, range.as_ptr()) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            };
        }
        let (offset, len) = (
            libc::off_t::try_from(offset).map_err(std::io::Error::other)?,
            libc::off_t::try_from(len).map_err(std::io::Error::other)?,
        );
        let modes = [
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        ];
        let mut last = std::io::Error::from_raw_os_error(libc::EOPNOTSUPP);
        for mode in modes {
            // SAFETY: fallocate on a descriptor we own; no memory is passed.
            if unsafe { libc::fallocate(fd, mode, offset, len) } == 0 {
                return Ok(());
            }
            last = std::io::Error::last_os_error();
        }
        Err(last)
    }

    /// Makes a volume's own file or device hold `size` bytes, the ones past `old` zeroed,
    /// on disk when this returns: a regular file grows (allocated if `allocate`); a block
    /// device must be that large already (its new extents may hold another LV's data, so
    /// they are zeroed).
    pub fn grow(&self, old: u64, size: u64, allocate: bool) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let meta = file.metadata()?;
        if meta.file_type().is_block_device() {
            let have = (&*file).seek(SeekFrom::End(0))?;
            if have < size {
                return Err(std::io::Error::other(format!(
                    "the block device holds {have} bytes: extend it first (lvextend)"
                )));
            }
            return self.zero_range(old, size - old);
        }
        if meta.len() < size {
            file.set_len(size)?;
        }
        if allocate {
            if let Err(e) = preallocate(file, size) {
                // Not left longer than it was: the next attempt allocates again.
                let _ = file.set_len(meta.len());
                return Err(e);
            }
        }
        file.sync_data()
    }

    /// Size and block size without creating or modifying anything (for `check`): an
    /// existing path is opened read-only; a missing one that would be created reports
    /// `create_size`.
    pub fn probe(cfg: &DeviceConfig) -> Result<(u64, u64), DiskError> {
        if !cfg.kind.has_file() {
            return Ok((null_size(cfg), 512));
        }
        let path = cfg
            .path
            .clone()
            .expect("validated: file devices have a path");
        if !path.exists() {
            return match cfg.create_size {
                Some(size) => Ok((size.0, 512)),
                None => Err(DiskError::Missing(path)),
            };
        }
        let io_err = |what, source| DiskError::Io {
            path: path.clone(),
            what,
            source,
        };
        let mut file = File::open(&path).map_err(|e| io_err("cannot open", e))?;
        let is_block_device = file
            .metadata()
            .map_err(|e| io_err("cannot stat", e))?
            .file_type()
            .is_block_device();
        let size = file
            .seek(SeekFrom::End(0))
            .map_err(|e| io_err("cannot read size", e))?;
        let block = if cfg.direct {
            direct_io_alignment(&file, is_block_device).0
        } else {
            512
        };
        Ok((size, block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn device(path: &std::path::Path, preallocate: bool) -> DeviceConfig {
        toml::from_str(&format!(
            "path = {path:?}\ncreate_size = \"8MiB\"\npreallocate = {preallocate}"
        ))
        .unwrap()
    }

    #[test]
    fn a_created_file_is_allocated_in_full_unless_told_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let full = dir.path().join("full.img");
        create_if_missing(&device(&full, true)).unwrap();
        let meta = std::fs::metadata(&full).unwrap();
        assert_eq!(meta.len(), 8 << 20);
        assert!(meta.blocks() * 512 >= 8 << 20, "{} blocks", meta.blocks());

        let sparse = dir.path().join("sparse.img");
        create_if_missing(&device(&sparse, false)).unwrap();
        let meta = std::fs::metadata(&sparse).unwrap();
        assert_eq!(meta.len(), 8 << 20);
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());

        // An existing file is left as it is.
        std::fs::write(&sparse, b"kept").unwrap();
        create_if_missing(&device(&sparse, true)).unwrap();
        assert_eq!(std::fs::read(&sparse).unwrap(), b"kept");
    }
}
