package waku.pipeline;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.UnsupportedFileSystemException;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager (spark.sql.streaming.checkpointFileManagerClass) that writes
 * files on the local file system without forking a process.
 *
 * <p>Spark's default (FileContext-based) writes a temporary file and renames it into place; on a
 * local file system that rename asks for the link status of both paths, which Hadoop answers by
 * running `readlink` in a child process of the JVM. A streaming query writes two such files a
 * micro-batch (its offset and commit logs) and Delta one a commit (its checksum file), so the
 * store job forked four or more processes a batch: 25-35 ms a file on an idle machine. Here, for
 * local paths, the file is written with java.nio and put in place by link(2) (LocalFiles), which
 * refuses an existing name atomically, also against another process: the check Spark's offset
 * log relies on to detect two queries on one checkpoint (Spark's own local rename checks, then
 * renames). Everything else on local paths is Spark's FileSystem-based manager. Other file systems
 * (HDFS, object stores) get exactly what Spark would choose without this setting.
 */
public class LocalCheckpointFileManager implements CheckpointFileManager {

  private final FileSystem fs;
  private final CheckpointFileManager delegate;
  private final boolean local;

  public LocalCheckpointFileManager(Path path, Configuration hadoopConf) throws IOException {
    this.fs = path.getFileSystem(hadoopConf);
    this.local = LocalFiles.localFile(fs, path) != null;
    this.delegate = local ? new FileSystemBasedCheckpointFileManager(path, hadoopConf) : sparkDefault(path, hadoopConf);
  }

  /** What CheckpointFileManager.create picks when no class is configured. */
  private static CheckpointFileManager sparkDefault(Path path, Configuration hadoopConf) throws IOException {
    try {
      return new FileContextBasedCheckpointFileManager(path, hadoopConf);
    } catch (Exception e) {
      if (e instanceof UnsupportedFileSystemException) {
        return new FileSystemBasedCheckpointFileManager(path, hadoopConf);
      }
      if (e instanceof IOException) {
        throw (IOException) e;
      }
      throw (RuntimeException) e;
    }
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    File file = local ? LocalFiles.localFile(fs, path) : null;
    if (file == null) {
      return delegate.createAtomic(path, overwriteIfPossible);
    }
    try {
      return new LinkedOutput(path, file.toPath(), overwriteIfPossible);
    } catch (IOException e) {
      throw new java.io.UncheckedIOException("cannot create a temporary file beside " + path, e);
    }
  }

  @Override
  public FSDataInputStream open(Path path) {
    return delegate.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return delegate.list(path, filter);
  }

  @Override
  public void mkdirs(Path path) {
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return delegate.exists(path);
  }

  @Override
  public void delete(Path path) {
    delegate.delete(path);
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }

  @Override
  public void close() {
    delegate.close();
  }

  /** Written to a temporary file beside the target; close publishes it, cancel discards it. */
  private static final class LinkedOutput extends CancellableFSDataOutputStream {
    private final Path path;
    private final java.nio.file.Path target;
    private final java.nio.file.Path temp;
    private final boolean overwrite;
    private boolean done;

    LinkedOutput(Path path, java.nio.file.Path target, boolean overwrite) throws IOException {
      this(path, target, LocalFiles.tempBeside(target), overwrite);
    }

    private LinkedOutput(Path path, java.nio.file.Path target, java.nio.file.Path temp, boolean overwrite)
        throws IOException {
      super(open(temp));
      this.path = path;
      this.target = target;
      this.temp = temp;
      this.overwrite = overwrite;
    }

    private static OutputStream open(java.nio.file.Path temp) throws IOException {
      Files.createDirectories(temp.getParent());
      return new java.io.BufferedOutputStream(
          Files.newOutputStream(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE));
    }

    @Override
    public synchronized void close() throws IOException {
      if (done) {
        return;
      }
      done = true;
      try {
        underlyingStream().close();
        if (!LocalFiles.publish(temp, target, overwrite)) {
          // No hard links here: Spark's FileSystem-based way (it checks, then renames).
          java.nio.file.Files.move(temp, target);
        }
      } catch (java.nio.file.FileAlreadyExistsException exists) {
        throw new FileAlreadyExistsException("Failed to rename temp file to " + path + " as it already exists");
      } finally {
        Files.deleteIfExists(temp);
      }
    }

    @Override
    public synchronized void cancel() {
      if (done) {
        return;
      }
      done = true;
      try {
        underlyingStream().close();
      } catch (IOException ignored) {
        // discarded anyway
      } finally {
        try {
          Files.deleteIfExists(temp);
        } catch (IOException ignored) {
          // a leftover temporary file is hidden from every listing
        }
      }
    }
  }
}
