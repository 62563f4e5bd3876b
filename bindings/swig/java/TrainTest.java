// Trains the quick start's model 5 steps on a corpus written here, through the SWIG Java binding
// (ctest: swig.java_train): the loss falls, readParam returns the parameter's element count, a
// callback can stop training (and its exception comes back to the caller), and a bad config
// throws a KeelException naming the JSON path. The inference calls are checked against oracles
// computed here: vocabSize/contextLength against the config, logits against Trainer.evaluate
// (the cross-entropy of the validation windows, recomputed in Java from logits() of the same
// tokens: the corpus is written here, so they are known), greedy generate against the argmax of
// logits(). Argument: a scratch folder, under which each run makes its own.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import keel.Keel;
import keel.KeelException;
import keel.PluginDescription;
import keel.StepCallback;
import keel.StepMetrics;
import keel.Trainer;

public class TrainTest {
  // The run's shapes, written into the config and compared with what the trainer reports.
  static final int VOCAB = 256;           // model.vocab_size: byte-level
  static final int CONTEXT = 64;          // data.seq_len (model.seq_len, 128, is only the maximum)
  static final int MICRO_BATCH = 4;       // data.micro_batch: evaluate's rows per batch
  static final int VAL_BATCHES = 2;       // data.val_batches
  static final int CORPUS_BYTES = 8192;   // the corpus file's size
  static final double VAL_FRACTION = 0.25;

  static void check(boolean condition, String what) {
    if (!condition) throw new AssertionError(what);
  }

  interface KeelCall {
    void run() throws KeelException;
  }

  // `call` must throw a KeelException with status INVALID_ARGUMENT whose message holds `fragment`.
  static void expectInvalidArgument(String what, String fragment, KeelCall call) {
    try {
      call.run();
    } catch (KeelException e) {
      System.out.println(what + ": " + e.getMessage());
      check(e.getStatus() == Keel.KEEL_ERR_INVALID_ARGUMENT, what + ": status INVALID_ARGUMENT, got " + e.getStatus());
      check(e.getMessage().contains(fragment), what + ": the message names \"" + fragment + "\": " + e.getMessage());
      return;
    }
    throw new AssertionError(what + " did not throw");
  }

  // CORPUS_BYTES of ASCII text: words drawn from a small list by a fixed LCG, so the model has
  // something to learn within a few steps and every run sees the same bytes.
  static byte[] corpus() {
    String[] words = {"the", "model", "learns", "a", "small", "corpus", "of", "bytes", "and", "then", "predicts",
                      "next", "token", "from", "its", "context", "window"};
    StringBuilder text = new StringBuilder();
    long state = 12345;
    for (int n = 0; text.length() < CORPUS_BYTES; ++n) {
      state = state * 6364136223846793005L + 1442695040888963407L;
      text.append(words[(int) ((state >>> 33) % words.length)]).append(n % 12 == 11 ? ".\n" : " ");
    }
    return text.substring(0, CORPUS_BYTES).getBytes(StandardCharsets.US_ASCII);
  }

  // The mean cross-entropy (nats) of evaluate()'s validation windows, from logits() computed here.
  // The text source keeps the last VAL_FRACTION of the bytes for validation (exactly 2048 of
  // 8192 here, so no rounding enters), and evaluate reads its VAL_BATCHES * MICRO_BATCH windows
  // unshuffled from the start of that part: window r holds tokens [r*T, r*T + T] and predicts
  // each next one. Equal-sized batches make the mean of batch means the mean over positions.
  // shiftBytes moves every window, for the control that the comparison can fail.
  static double validationCrossEntropy(Trainer trainer, byte[] corpus, int shiftBytes) throws KeelException {
    final int split = CORPUS_BYTES - (int) (CORPUS_BYTES * VAL_FRACTION) + shiftBytes;
    final int rows = VAL_BATCHES * MICRO_BATCH, positions = rows * CONTEXT;
    int[] tokens = new int[positions];
    int[] targets = new int[positions];
    for (int i = 0; i < positions; ++i) {
      int r = i / CONTEXT, p = i % CONTEXT;
      tokens[i] = corpus[split + r * CONTEXT + p] & 0xff;
      targets[i] = corpus[split + r * CONTEXT + p + 1] & 0xff;
    }
    float[] logits = trainer.logits(tokens, rows, CONTEXT);
    check(logits.length == positions * VOCAB,
          "logits are (" + rows + ", " + CONTEXT + ", " + VOCAB + ") = " + positions * VOCAB + " values, got "
              + logits.length);
    double total = 0;
    for (int i = 0; i < positions; ++i) {
      int row = i * VOCAB;
      double max = Double.NEGATIVE_INFINITY;
      for (int v = 0; v < VOCAB; ++v) {
        check(Float.isFinite(logits[row + v]), "logit (" + i / CONTEXT + ", " + i % CONTEXT + ", " + v + ") is finite");
        max = Math.max(max, logits[row + v]);
      }
      double sum = 0;
      for (int v = 0; v < VOCAB; ++v) sum += Math.exp(logits[row + v] - max);
      total += max + Math.log(sum) - logits[row + targets[i]];
    }
    return total / positions;
  }

  // evaluate() and logits() run the same float32 forward over the same rows, so the two means of
  // 512 per-position losses differ by rounding only (about 1e-7 here), far below this tolerance.
  static final double EVALUATE_TOLERANCE = 1e-4;

  // Returns evaluate()'s loss after checking it against the cross-entropy from logits().
  static double checkAgainstEvaluate(Trainer trainer, byte[] corpus, String when) throws KeelException {
    double fromLogits = validationCrossEntropy(trainer, corpus, 0);
    double evaluated = trainer.evaluate();
    System.out.printf("%s: cross-entropy from logits() %.7f, evaluate() %.7f%n", when, fromLogits, evaluated);
    check(Math.abs(fromLogits - evaluated) < EVALUATE_TOLERANCE,
          when + ": cross-entropy from logits() " + fromLogits + " matches evaluate() " + evaluated);
    return evaluated;
  }

  static int argmax(float[] values, int from, int count) {
    int best = 0;
    for (int v = 1; v < count; ++v)
      if (values[from + v] > values[from + best]) best = v;
    return best;
  }

  static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  static String quickstart(Path dir, String microBatch) {
    return "{\n"
        + "  \"model\": {\"plugin\": \"gpt\", \"n_layer\": 4, \"n_head\": 4, \"d_model\": 128, \"vocab_size\": " + VOCAB
        + ", \"seq_len\": 128},\n"
        + "  \"optimizer\": {\"plugin\": \"adamw\", \"lr\": 2e-3, \"betas\": [0.9, 0.95], \"weight_decay\": 0.1},\n"
        + "  \"lr_schedule\": {\"warmup_steps\": 2, \"decay\": \"cosine\", \"min_lr_ratio\": 0.1},\n"
        + "  \"parallel\": {\"strategy\": {\"plugin\": \"ddp\"}},\n"
        + "  \"backend\": {\"plugin\": \"cpu\"},\n"
        + "  \"data\": {\"source\": \"text\", \"text_root\": " + quote(dir.resolve("corpus.txt").toString())
        + ", \"val_fraction\": " + VAL_FRACTION + ",\n"
        + "           \"micro_batch\": " + microBatch + ", \"global_batch\": 4, \"seq_len\": " + CONTEXT
        + ", \"val_batches\": " + VAL_BATCHES + "},\n"
        + "  \"train\": {\"steps\": 5, \"seed\": 1337, \"grad_clip\": 1.0, \"log_every\": 1, \"eval_every\": 0,\n"
        + "            \"metrics_path\": " + quote(dir.resolve("metrics.jsonl").toString())
        + ", \"tensorboard_dir\": \"none\",\n"
        + "            \"checkpoint\": {\"dir\": " + quote(dir.resolve("checkpoints").toString())
        + "}, \"sample_tokens\": 0}\n"
        + "}\n";
  }

  public static void main(String[] args) throws Exception {
    Path dir = Files.createTempDirectory(Files.createDirectories(Paths.get(args[0])), "run-");
    byte[] corpus = corpus();
    Files.write(dir.resolve("corpus.txt"), corpus);

    boolean foundGpt = false;
    for (PluginDescription p : Keel.plugins()) foundGpt |= p.getKind().equals("model") && p.getName().equals("gpt");
    check(foundGpt, "plugins() lists the gpt model");

    try (Trainer trainer = Trainer.fromJson(quickstart(dir, String.valueOf(MICRO_BATCH)))) {
      check(trainer.vocabSize() == VOCAB, "vocabSize() is model.vocab_size " + VOCAB + ", got " + trainer.vocabSize());
      check(trainer.contextLength() == CONTEXT,
            "contextLength() is data.seq_len " + CONTEXT + ", got " + trainer.contextLength());

      // GPT-2's init (weights N(0, 0.02)) gives logits of standard deviation about
      // 0.02 * sqrt(d_model) = 0.23, so the untrained cross-entropy is near ln(vocab) + 0.23^2/2,
      // 0.03 above ln(vocab); 0.25 leaves room for other seeds without admitting a trained model.
      double untrained = checkAgainstEvaluate(trainer, corpus, "untrained");
      check(Math.abs(untrained - Math.log(VOCAB)) < 0.25,
            "untrained cross-entropy " + untrained + " is near ln(" + VOCAB + ") = " + Math.log(VOCAB));
      checkGreedy(trainer, corpus, "untrained");

      float first = 0, last = 0;
      for (int i = 0; i < 5; ++i) {
        StepMetrics m = trainer.step();
        System.out.printf("step %d loss %.4f lr %.2e grad_norm %.3f%n", m.getStep(), m.getLoss(), m.getLr(),
                          m.getGradNorm());
        check(Float.isFinite(m.getLoss()), "finite loss");
        if (i == 0) first = m.getLoss();
        last = m.getLoss();
      }
      check(last < first, "loss falls over 5 steps: " + first + " -> " + last);
      check(trainer.lastMetrics().getStep() == 5, "lastMetrics().step == 5");
      double trained = checkAgainstEvaluate(trainer, corpus, "after 5 steps");
      // The corpus uses 24 distinct bytes with a unigram entropy of 2.9 nats: learning their
      // frequencies alone takes the loss from ln(256) = 5.5 to 2.9, and 5 steps go part of the way.
      check(trained < untrained - 0.5, "5 steps lower the validation cross-entropy: " + untrained + " -> " + trained);
      // Control: the validation part's next 8 windows, other text of the same kind, give another
      // loss by far more than the tolerance, so matching evaluate() means reading its windows.
      double others = validationCrossEntropy(trainer, corpus, VAL_BATCHES * MICRO_BATCH * CONTEXT);
      System.out.printf("control: the next %d windows give %.7f%n", VAL_BATCHES * MICRO_BATCH, others);
      check(Math.abs(others - trained) > 10 * EVALUATE_TOLERANCE,
            "the comparison with evaluate() can fail: the next windows give " + others + ", not " + trained);

      checkSampling(trainer, corpus);
      checkGreedy(trainer, corpus, "after 5 steps");
      checkBadInferenceCalls(trainer);

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

  // corpus[from, from + length) as token ids.
  static int[] prompt(byte[] corpus, int from, int length) {
    int[] prompt = new int[length];
    for (int i = 0; i < length; ++i) prompt[i] = corpus[from + i] & 0xff;
    return prompt;
  }

  static void checkSampling(Trainer trainer, byte[] corpus) throws KeelException {
    int[] prompt = prompt(corpus, 0, 12);
    int[] sampled = trainer.generate(prompt, 32, 1.0, 42);
    System.out.println("sampled at temperature 1: " + Arrays.toString(sampled));
    check(sampled.length == 32, "generate(prompt, 32, ...) returns 32 tokens, not the prompt too: " + sampled.length);
    for (int token : sampled)
      check(token >= 0 && token < VOCAB, "generated token " + token + " is in [0, " + VOCAB + ")");
    check(Arrays.equals(sampled, trainer.generate(prompt, 32, 1.0, 42)), "the same seed gives the same tokens");
    // Fixed seeds, so this passes or fails the same way every run; a lost seed gives equal arrays.
    check(!Arrays.equals(sampled, trainer.generate(prompt, 32, 1.0, 43)), "another seed gives other tokens");
    check(trainer.generate(prompt, 0, 1.0, 42).length == 0, "count 0 gives no tokens");
    check(trainer.generate(new int[0], 3, -1.0, 42).length == 3,
          "an empty prompt at the config's temperature gives 3 tokens");
  }

  // Temperature 0 picks each next token by the argmax of the logits at the context's last
  // position; both go through the same padded forward, so the rows are the same numbers. Three
  // prompts of other lengths and endings: a barely trained model's argmax barely depends on the
  // context (untrained it tends to repeat the last token, after 5 steps to predict a space).
  static void checkGreedy(Trainer trainer, byte[] corpus, String when) throws KeelException {
    for (int[] prompt : new int[][] {prompt(corpus, 0, 12), prompt(corpus, 101, 5), prompt(corpus, 230, 23)})
      checkGreedy(trainer, prompt, when);
  }

  static void checkGreedy(Trainer trainer, int[] prompt, String when) throws KeelException {
    int[] greedy = trainer.generate(prompt, 4, 0.0, 7);
    int[] context = Arrays.copyOf(prompt, prompt.length + greedy.length);
    for (int i = 0; i < greedy.length; ++i) {
      int length = prompt.length + i;
      float[] logits = trainer.logits(Arrays.copyOf(context, length), 1, length);
      int expected = argmax(logits, (length - 1) * VOCAB, VOCAB);
      check(greedy[i] == expected,
            when + ": greedy token " + i + " is " + greedy[i] + ", the argmax of logits() is " + expected);
      context[length] = expected;
    }
    check(Arrays.equals(greedy, trainer.generate(prompt, 4, 0.0, 8)), "at temperature 0 the seed does not matter");
    System.out.println(when + ": greedy tokens match the argmax of logits(): " + Arrays.toString(greedy));
  }

  static void checkBadInferenceCalls(Trainer trainer) {
    expectInvalidArgument("logits with seqLen 0", "seqLen 0", () -> trainer.logits(new int[0], 1, 0));
    expectInvalidArgument("logits with 3 ids for (1, 4)", "3 token ids", () -> trainer.logits(new int[3], 1, 4));
    int[] outside = new int[4];
    outside[2] = VOCAB;
    expectInvalidArgument("logits with id " + VOCAB, "outside the vocabulary", () -> trainer.logits(outside, 1, 4));
    expectInvalidArgument("logits past the context", "data.seq_len",
                          () -> trainer.logits(new int[CONTEXT + 1], 1, CONTEXT + 1));
    expectInvalidArgument("generate with prompt id -1", "outside the vocabulary",
                          () -> trainer.generate(new int[] {5, -1}, 4, 1.0, 1));
    expectInvalidArgument("generate with count -1", "count is negative",
                          () -> trainer.generate(new int[] {5}, -1, 1.0, 1));
  }
}
