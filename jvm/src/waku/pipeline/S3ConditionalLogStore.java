package waku.pipeline;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for S3 (spark.delta.logStore.s3a.impl) that is safe for writers in several
 * drivers: a commit file is created with S3's conditional PUT (If-None-Match: *), through
 * Hadoop 3.5's S3A conditional create (createFile(...).must("fs.option.create.conditional.overwrite")).
 * The store answers a second writer of the same version with 412 (or 409 while the first is in
 * flight), which becomes the FileAlreadyExistsException Delta retries on with the next version.
 *
 * <p>Delta's own S3SingleDriverLogStore checks that the file is absent and then writes: atomic
 * only within one JVM (it locks per path there), so the store job and `maintain` (two drivers)
 * could each write version N and one commit be lost. Delta 4.4 ships no conditional-write log
 * store; its S3DynamoDBLogStore needs DynamoDB. Reads and listing are Delta's (S3 lists
 * consistently); a PUT is visible whole or not at all (isPartialWriteVisible false).
 */
public class S3ConditionalLogStore extends HadoopFileSystemLogStore {

  /** Hadoop's option (3.5) for a create that fails when the object exists, decided by the store. */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  public S3ConditionalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(overwrite);
    if (!overwrite) {
      builder.must(CONDITIONAL_CREATE, true);
    }
    try (FSDataOutputStream out = builder.build()) {
      while (actions.hasNext()) {
        out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (IOException e) {
      if (!overwrite && preconditionFailed(e)) {
        throw new FileAlreadyExistsException(path.toString());
      }
      throw e;
    }
  }

  /** Whether a failed PUT was the store refusing an existing object (412, or 409 in flight). */
  static boolean preconditionFailed(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      String name = t.getClass().getSimpleName();
      String msg = String.valueOf(t.getMessage());
      if (name.equals("RemoteFileChangedException") || name.equals("FileAlreadyExistsException")
          || msg.contains("412") || msg.contains("PreconditionFailed") || msg.contains("ConditionalRequestConflict")) {
        return true;
      }
    }
    return false;
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;
  }
}
