// Trains the quick start 5 steps through the SWIG Java binding (ctest: swig.java_train): the loss
// falls, readParam returns the parameter's element count, a callback can stop training (and its
// exception comes back to the caller), and a bad config throws a KeelException naming the JSON
// path. Argument: a scratch folder, under which each run makes its own.
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import keel.Keel;
import keel.KeelException;
import keel.PluginDescription;
import keel.StepCallback;
import keel.StepMetrics;
import keel.Trainer;

public class TrainTest {
  static void check(boolean condition, String what) {
    if (!condition) throw new AssertionError(what);
  }

  static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  static String quickstart(Path dir, String microBatch) {
    return "{\n"
        + "  \"model\": {\"plugin\": \"gpt\", \"n_layer\": 4, \"n_head\": 4, \"d_model\": 128, \"vocab_size\": 256, \"seq_len\": 128},\n"
        + "  \"optimizer\": {\"plugin\": \"adamw\", \"lr\": 2e-3, \"betas\": [0.9, 0.95], \"weight_decay\": 0.1},\n"
        + "  \"lr_schedule\": {\"warmup_steps\": 2, \"decay\": \"cosine\", \"min_lr_ratio\": 0.1},\n"
        + "  \"parallel\": {\"strategy\": {\"plugin\": \"ddp\"}},\n"
        + "  \"backend\": {\"plugin\": \"cpu\"},\n"
        + "  \"data\": {\"source\": \"text\", \"micro_batch\": " + microBatch + ", \"global_batch\": 4, \"seq_len\": 64, \"val_batches\": 2},\n"
        + "  \"train\": {\"steps\": 5, \"seed\": 1337, \"grad_clip\": 1.0, \"log_every\": 1, \"eval_every\": 0,\n"
        + "            \"metrics_path\": " + quote(dir.resolve("metrics.jsonl").toString()) + ", \"tensorboard_dir\": \"none\",\n"
        + "            \"checkpoint\": {\"dir\": " + quote(dir.resolve("checkpoints").toString()) + "}, \"sample_tokens\": 0}\n"
        + "}\n";
  }

  public static void main(String[] args) throws Exception {
    Path dir = Files.createTempDirectory(Files.createDirectories(Paths.get(args[0])), "run-");

    boolean foundGpt = false;
    for (PluginDescription p : Keel.plugins()) foundGpt |= p.getKind().equals("model") && p.getName().equals("gpt");
    check(foundGpt, "plugins() lists the gpt model");

    try (Trainer trainer = Trainer.fromJson(quickstart(dir, "4"))) {
      float first = 0, last = 0;
      for (int i = 0; i < 5; ++i) {
        StepMetrics m = trainer.step();
        System.out.printf("step %d loss %.4f lr %.2e grad_norm %.3f%n", m.getStep(), m.getLoss(), m.getLr(), m.getGradNorm());
        check(Float.isFinite(m.getLoss()), "finite loss");
        if (i == 0) first = m.getLoss();
        last = m.getLoss();
      }
      check(last < first, "loss falls over 5 steps: " + first + " -> " + last);
      check(trainer.lastMetrics().getStep() == 5, "lastMetrics().step == 5");
      check(Float.isFinite(trainer.evaluate()), "finite validation loss");

      String name = trainer.paramNames().get(0);
      long elements = 1;
      for (long d : trainer.paramShape(name)) elements *= d;
      float[] values = trainer.readParam(name);
      check(values.length == elements, "readParam(" + name + ") has " + elements + " elements, got " + values.length);
      trainer.writeParam(name, new float[values.length]);
      check(trainer.readParam(name)[0] == 0.0f, "writeParam zeroes the parameter");
      trainer.writeParam(name, values);

      int[] calls = {0};
      StepMetrics stopped = trainer.train(10, new StepCallback() {
        @Override
        public boolean onStep(StepMetrics m) {
          return ++calls[0] < 2;
        }
      });
      check(calls[0] == 2 && stopped.getStep() == 7, "a callback returning false stops training");
      try {
        trainer.train(3, new StepCallback() {
          @Override
          public boolean onStep(StepMetrics m) {
            throw new IllegalStateException("raised in the callback");
          }
        });
        throw new AssertionError("the callback's exception was lost");
      } catch (IllegalStateException e) {
        check(e.getMessage().equals("raised in the callback"), "the callback's own exception comes back");
      }
      check(trainer.lastMetrics().getStep() == 8, "training stopped after the raising callback's step");

      trainer.save(dir.resolve("saved").toString(), 1);
      trainer.load(dir.resolve("saved").toString());
    }

    try {
      Trainer.fromJson(quickstart(dir, "\"four\"")).close();
      throw new AssertionError("a bad config did not throw");
    } catch (KeelException e) {
      System.out.println("bad config: " + e.getMessage());
      check(e.getMessage().contains("data.micro_batch"), "the message names the JSON path: " + e.getMessage());
      check(e.getStatus() == Keel.KEEL_ERR_INVALID_CONFIG, "status KEEL_ERR_INVALID_CONFIG, got " + e.getStatus());
    }
    System.out.println("TrainTest passed");
  }
}
