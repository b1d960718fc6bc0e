package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import io.delta.storage.HDFSLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** LocalFiles' publication by link(2), and LocalDirLogStore (which publishes through it) against Delta's own. */
class LocalFilesTest {
  @TempDir
  Path dir;

  private static Path write(Path p, String text) throws IOException {
    return Files.writeString(p, text, StandardCharsets.UTF_8);
  }

  @Test
  void aTemporaryNameIsAHiddenSiblingNewEachTime() {
    Path target = dir.resolve("00000000000000000001.json");
    Path a = LocalFiles.tempBeside(target);
    Path b = LocalFiles.tempBeside(target);
    assertEquals(dir, a.getParent());
    assertTrue(a.getFileName().toString().startsWith(".00000000000000000001.json."));
    assertTrue(a.getFileName().toString().endsWith(".tmp"));
    assertNotEquals(a, b);
  }

  @Test
  void publishPutsTheFileInPlaceAndDropsAStaleChecksumSidecar() throws IOException {
    Path target = dir.resolve("f");
    Path sidecar = write(dir.resolve(".f.crc"), "old checksum");
    Path temp = write(LocalFiles.tempBeside(target), "new");
    assertTrue(LocalFiles.publish(temp, target, false));
    assertEquals("new", Files.readString(target));
    assertFalse(Files.exists(temp));
    assertFalse(Files.exists(sidecar));
  }

  @Test
  void publishWithoutOverwriteFailsWhenTheTargetExistsAndLeavesIt() throws IOException {
    Path target = write(dir.resolve("f"), "first");
    Path sidecar = write(dir.resolve(".f.crc"), "first's checksum");
    Path temp = write(LocalFiles.tempBeside(target), "second");
    assertThrows(FileAlreadyExistsException.class, () -> LocalFiles.publish(temp, target, false));
    assertEquals("first", Files.readString(target));
    assertTrue(Files.exists(sidecar));
    assertFalse(Files.exists(temp));
  }

  @Test
  void publishWithOverwriteReplaces() throws IOException {
    Path target = write(dir.resolve("f"), "first");
    Path sidecar = write(dir.resolve(".f.crc"), "first's checksum");
    Path temp = write(LocalFiles.tempBeside(target), "second");
    assertTrue(LocalFiles.publish(temp, target, true));
    assertEquals("second", Files.readString(target));
    assertFalse(Files.exists(temp));
    assertFalse(Files.exists(sidecar));
  }

  @Test
  void theLocalFileOfAHadoopPath() throws IOException {
    Configuration conf = new Configuration();
    org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path(dir.toUri().toString(), "x");
    LocalFileSystem local = FileSystem.getLocal(conf);
    assertEquals(dir.resolve("x").toFile(), LocalFiles.localFile(local, p));
    assertEquals(dir.resolve("x").toFile(), LocalFiles.localFile(local.getRawFileSystem(), p));
  }

  // -- LocalDirLogStore ------------------------------------------------------------------------

  private static List<String> names(Iterator<FileStatus> it) {
    List<String> out = new ArrayList<>();
    it.forEachRemaining(s -> out.add(s.getPath().getName() + (s.isDirectory() ? "/" : "")));
    return out;
  }

  @Test
  void theLogStoreListsWhatDeltasOwnLists() throws IOException {
    Configuration conf = new Configuration();
    Path log = Files.createDirectories(dir.resolve("_delta_log"));
    for (int v = 0; v < 6; v++) {
      write(log.resolve(String.format("%020d.json", v)), "{}\n");
      write(log.resolve(String.format(".%020d.json.crc", v)), "crc");
      write(log.resolve(String.format("%020d.crc", v)), "{}");
    }
    write(log.resolve("00000000000000000004.checkpoint.parquet"), "pq");
    write(log.resolve("_last_checkpoint"), "{}");
    Files.createDirectories(log.resolve("_commits"));
    org.apache.hadoop.fs.Path start = new org.apache.hadoop.fs.Path(log.toUri().toString(),
        "00000000000000000002.json");
    List<String> ours = names(new LocalDirLogStore(conf).listFrom(start, conf));
    assertEquals(names(new HDFSLogStore(conf).listFrom(start, conf)), ours);
    assertEquals("00000000000000000002.json", ours.get(0));
    assertTrue(ours.contains("_last_checkpoint"));
    assertFalse(ours.stream().anyMatch(n -> n.startsWith(".")));
  }

  @Test
  void theLogStoreListingOfAMissingDirectoryIsFileNotFound() {
    Configuration conf = new Configuration();
    org.apache.hadoop.fs.Path start = new org.apache.hadoop.fs.Path(dir.resolve("none").toUri().toString(), "0.json");
    assertThrows(FileNotFoundException.class, () -> new LocalDirLogStore(conf).listFrom(start, conf));
  }

  @Test
  void theLogStoreWritesACommitOnceUnlessOverwriting() throws IOException {
    Configuration conf = new Configuration();
    LocalDirLogStore store = new LocalDirLogStore(conf);
    Path file = dir.resolve("_delta_log").resolve("00000000000000000000.json");
    org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path(file.toUri().toString());
    store.write(p, List.of("{\"a\":1}", "{\"b\":2}").iterator(), false, conf);  // creates the directory
    assertEquals("{\"a\":1}\n{\"b\":2}\n", Files.readString(file));
    assertThrows(FileAlreadyExistsException.class,
        () -> store.write(p, List.of("{\"c\":3}").iterator(), false, conf));
    assertEquals("{\"a\":1}\n{\"b\":2}\n", Files.readString(file));
    store.write(p, List.of("{\"c\":3}").iterator(), true, conf);
    assertEquals("{\"c\":3}\n", Files.readString(file));
    File[] left = file.getParent().toFile().listFiles();
    assertEquals(1, left.length, "no temporary file left: " + List.of(left));
  }
}
