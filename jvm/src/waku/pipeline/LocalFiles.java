package waku.pipeline;

import java.io.File;
import java.io.IOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.UUID;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Atomic file publication on the local file system, for Delta's log store (LocalDirLogStore) and
 * Spark's checkpoint files (LocalCheckpointFileManager): a file is written under a temporary name
 * beside its target with java.nio, then put in place by link(2), which fails when the name
 * exists, atomically, also against writers in other processes; an overwrite is an atomic rename.
 * Hadoop's own rename on a local file system asks for the link status of both paths, which it
 * answers by running `readlink` in a child process of the JVM, and checks, then renames.
 */
final class LocalFiles {

  private LocalFiles() {
  }

  /** The local file of a Hadoop path, or null when its file system is not the local one. */
  static File localFile(FileSystem fs, org.apache.hadoop.fs.Path path) {
    if (fs instanceof LocalFileSystem) {
      return ((LocalFileSystem) fs).pathToFile(path);
    }
    if (fs instanceof RawLocalFileSystem) {
      return ((RawLocalFileSystem) fs).pathToFile(path);
    }
    return null;
  }

  /** A fresh temporary name beside `target`, hidden (a leading dot) from Spark's and Delta's listings. */
  static Path tempBeside(Path target) {
    return target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
  }

  /**
   * Puts `temp` in place as `target` and removes `temp`'s name. Without `overwrite` it fails with
   * java.nio's FileAlreadyExistsException when `target` exists. Returns false, leaving `temp`
   * where it is, when the file system has no hard links (the caller then uses its own way).
   * Hadoop's checksum sidecar of an earlier file of the target's name (written through Hadoop)
   * would no longer match the new content, and Hadoop's reads would fail on it: it is removed.
   */
  static boolean publish(Path temp, Path target, boolean overwrite) throws IOException {
    Path sidecar = target.resolveSibling("." + target.getFileName() + ".crc");
    if (overwrite) {
      Files.deleteIfExists(sidecar);
      Files.move(temp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
      return true;
    }
    try {
      Files.createLink(target, temp);
    } catch (FileAlreadyExistsException exists) {
      Files.deleteIfExists(temp);
      throw exists;
    } catch (UnsupportedOperationException | FileSystemException noLinks) {
      return false;
    }
    Files.deleteIfExists(sidecar);
    Files.deleteIfExists(temp);
    return true;
  }
}
