package waku.pipeline;

import io.delta.storage.HDFSLogStore;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Delta's log store for the local file system (spark.delta.logStore.file.impl): Delta's own
 * default for it (HDFSLogStore, atomic rename through FileContext) with one change, its listing.
 *
 * <p>Delta lists a table's _delta_log from a version on every commit and snapshot update; on a
 * Hadoop file system that is listStatus of the whole directory, a stat of every entry (about
 * 10 microseconds each here) before the names below the start are dropped. A log directory grows
 * by four entries a commit (the commit, Delta's checksum, and Hadoop's sidecar of each) until log
 * cleanup, so a table committed every second would take seconds a commit within hours. Here the names
 * are read first (one readdir, no stat), and only those from the start on are stat'ed and
 * sorted: Delta's result (the same entries in the same order, checksum sidecars excluded as
 * Hadoop's local file system excludes them), at the cost of a readdir: a commit took 1.3 s
 * with 100,000 entries below the start through Delta's listing, 0.26 s through this one (0.25 s
 * with none). The log's retention (store tables: 1 hour) keeps the directory small for every
 * reader (delta-rs lists it too).
 */
public class LocalDirLogStore extends HDFSLogStore {

  public LocalDirLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    File dir;
    if (fs instanceof LocalFileSystem) {
      dir = ((LocalFileSystem) fs).pathToFile(path.getParent());
    } else if (fs instanceof RawLocalFileSystem) {
      dir = ((RawLocalFileSystem) fs).pathToFile(path.getParent());
    } else {
      return super.listFrom(path, hadoopConf);
    }
    String[] names = dir.list();
    if (names == null) {
      throw new FileNotFoundException("No such file or directory: " + path.getParent());
    }
    String start = path.getName();
    List<String> picked = new ArrayList<>();
    for (String name : names) {
      if (name.compareTo(start) >= 0 && !(name.startsWith(".") && name.endsWith(".crc"))) {
        picked.add(name);
      }
    }
    picked.sort(null);
    List<FileStatus> out = new ArrayList<>(picked.size());
    for (String name : picked) {
      try {
        out.add(fs.getFileStatus(new Path(path.getParent(), name)));
      } catch (FileNotFoundException gone) {
        // deleted since the readdir (log cleanup): as if listed a moment later
      }
    }
    return out.iterator();
  }
}
