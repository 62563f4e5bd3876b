/* keel.i: the SWIG interface of Keel's embedding API (abi/keel/embed.h).

   Why a C++ layer instead of %include "keel/embed.h": the C API returns results through
   out-parameters and status codes, which SWIG would expose as raw pointers. The small classes
   below (Trainer, StepMetrics, StepCallback, PluginDescription) turn them into return values and
   exceptions, so every target language gets natural calls without typemaps of its own.

   Meant for Java (built and tested by bindings/swig/tests.cmake with `-module Keel -package
   keel`), and kept usable by SWIG's other class-based targets (C#, Python, Go, Ruby, ...): the
   only language-specific parts are the #ifdef SWIGJAVA sections (float[]/int[]/long[] arrays, the
   checked keel.KeelException, AutoCloseable, loading the JNI library). Other languages get
   std::vector wrappers and SWIG's generic runtime error. Directors (a subclassed StepCallback)
   need a language with director support. */
%module(directors="1") keel

%{
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "keel/keel.h"

/* The one error path: a failed status becomes this C++ exception carrying keel_last_error(); the
   %exception blocks below turn it into the target language's exception. */
struct KeelError : std::runtime_error {
  keel_status status;
  KeelError(keel_status code, const std::string& message) : std::runtime_error(message), status(code) {}
};

static void keel_check(keel_status status) {
  if (status != KEEL_OK) throw KeelError(status, keel_last_error());
}
%}

%include <stdint.i>
%include <std_string.i>
%include <std_vector.i>
%include <exception.i>

/* Status codes, ABI version, device/dtype tags as constants; the C structs stay C-side. */
%ignore keel_device;
%ignore keel_dtype;
%ignore keel_tensor;
%include "keel/version.h"
%include "keel/types.h"

/* --- values handed back: read-only in every language --- */
%immutable;
%naturalvar PluginDescription;
%inline %{
/* What one optimizer step reported (keel_step_metrics without struct_size). */
struct StepMetrics {
  int64_t step;        /* optimizer steps done, after this one */
  float loss;          /* mean training loss over the step's micro-batches */
  float lr;
  float gradNorm;      /* before clipping */
  double tokensPerS;
  double mfu;          /* fraction of the backend's peak */
  double stepMs;
};

/* One plugin the loader found; path is "" for plugins registered in-process. */
struct PluginDescription {
  std::string kind;
  std::string name;
  std::string version;
  int abiMajor;
  int abiMinor;
  std::string path;
  std::string description;
};
%}
%mutable;

/* Subclass in the target language and pass to Trainer.train: onStep sees each step's metrics
   (valid during the call) and returns false to stop training after that step. */
%feature("director") StepCallback;
%inline %{
class StepCallback {
 public:
  virtual ~StepCallback() {}
  virtual bool onStep(const StepMetrics& metrics) { (void)metrics; return true; }
};
%}

%{
static StepMetrics keel_to_metrics(const keel_step_metrics& m) {
  StepMetrics out = {m.step, m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.mfu, m.step_ms};
  return out;
}

static keel_step_metrics keel_sized_metrics() {
  keel_step_metrics m = {};
  m.struct_size = sizeof m;
  return m;
}

/* keel_trainer_train calls C; an exception from the callback (a target-language exception
   wrapped by the director) must not unwind through it, so it is kept and rethrown after. */
struct KeelTrainCallback {
  StepCallback* callback;
  std::exception_ptr error;
};

static int32_t keel_on_step(const keel_step_metrics* metrics, void* user_data) {
  KeelTrainCallback* state = static_cast<KeelTrainCallback*>(user_data);
  try {
    return state->callback->onStep(keel_to_metrics(*metrics)) ? 0 : 1;
  } catch (...) {
    state->error = std::current_exception();
    return 1;
  }
}
%}

/* --- containers --- */
%template(PluginList) std::vector<PluginDescription>;
%template(StringList) std::vector<std::string>;

#ifdef SWIGJAVA
/* Java: parameters and logits cross as float[], token ids as int[] and shapes as long[], copied
   once, instead of List proxies. */
%define KEEL_JAVA_ARRAY(CTYPE, JNITYPE, JAVATYPE, JNIELEM, NEWARRAY, SETREGION, GETREGION)
%typemap(jni) std::vector<CTYPE>, const std::vector<CTYPE>& "JNITYPE"
%typemap(jtype) std::vector<CTYPE>, const std::vector<CTYPE>& "JAVATYPE"
%typemap(jstype) std::vector<CTYPE>, const std::vector<CTYPE>& "JAVATYPE"
%typemap(javaout) std::vector<CTYPE> { return $jnicall; }
%typemap(javain) const std::vector<CTYPE>& "$javainput"
%typemap(out) std::vector<CTYPE> {
  $result = jenv->NEWARRAY((jsize)$1.size());
  if ($result) jenv->SETREGION($result, 0, (jsize)$1.size(), (const JNIELEM*)$1.data());
}
%typemap(in) const std::vector<CTYPE>& (std::vector<CTYPE> temp) {
  if (!$input) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "null array");
    return $null;
  }
  temp.resize((size_t)jenv->GetArrayLength($input));
  jenv->GETREGION($input, 0, (jsize)temp.size(), (JNIELEM*)temp.data());
  $1 = &temp;
}
%enddef
KEEL_JAVA_ARRAY(float, jfloatArray, float[], jfloat, NewFloatArray, SetFloatArrayRegion, GetFloatArrayRegion)
KEEL_JAVA_ARRAY(int32_t, jintArray, int[], jint, NewIntArray, SetIntArrayRegion, GetIntArrayRegion)
KEEL_JAVA_ARRAY(long long, jlongArray, long[], jlong, NewLongArray, SetLongArrayRegion, GetLongArrayRegion)

/* Java: try-with-resources closes a trainer; the JNI library loads once, from the path in
   -Dkeel.jni.library when set, else by name (libkeeljni.so on java.library.path). */
%typemap(javainterfaces) Trainer "AutoCloseable"
%typemap(javacode) Trainer %{
  /** Destroys the core's trainer now (also done when the object is collected). */
  @Override
  public void close() {
    delete();
  }
%}
%pragma(java) jniclasscode=%{
  static {
    String path = System.getProperty("keel.jni.library");
    if (path != null) System.load(path); else System.loadLibrary("keeljni");
  }
%}
#else
%template(FloatVector) std::vector<float>;
%template(Int32Vector) std::vector<int32_t>;
%template(LongLongVector) std::vector<long long>;
#endif

/* --- errors: every call below may fail --- */
#ifdef SWIGJAVA
%{
/* Throws keel.KeelException(message, status) in the calling Java thread (package keel: the
   build passes -package keel). */
static void keel_throw_java(JNIEnv* jenv, const KeelError& error) {
  jclass cls = jenv->FindClass("keel/KeelException");
  if (!cls) return; /* NoClassDefFoundError is pending */
  jmethodID ctor = jenv->GetMethodID(cls, "<init>", "(Ljava/lang/String;I)V");
  if (!ctor) return;
  jstring message = jenv->NewStringUTF(error.what());
  jobject exception = jenv->NewObject(cls, ctor, message, (jint)error.status);
  if (exception) jenv->Throw((jthrowable)exception);
}
%}
%javaexception("keel.KeelException") {
  try {
    $action
  } catch (const KeelError& e) {
    keel_throw_java(jenv, e);
    return $null;
  } catch (Swig::DirectorException& e) {
    e.throwException(jenv); /* the callback's own Java exception, rethrown as it was */
    return $null;
  } catch (const std::exception& e) {
    SWIG_JavaThrowException(jenv, SWIG_JavaRuntimeException, e.what());
    return $null;
  }
}
#else
%exception {
  try {
    $action
  } catch (const std::exception& e) {
    SWIG_exception(SWIG_RuntimeError, e.what());
  }
}
#endif

%newobject Trainer::fromJson;
%newobject Trainer::fromFile;
#ifdef SWIGJAVA
%nojavaexception Trainer::~Trainer;
#else
%noexception Trainer::~Trainer;
#endif
%inline %{
/* A trainer built from a JSON config; destroying the object destroys the core's trainer.
   One thread at a time per trainer; distinct trainers may run on distinct threads. */
class Trainer {
 public:
  /* A trainer from JSON text; a bad config throws with the message naming the JSON path. */
  static Trainer* fromJson(const std::string& jsonText) {
    keel_trainer* handle = NULL;
    keel_check(keel_trainer_create_from_json(jsonText.c_str(), &handle));
    return new Trainer(handle);
  }
  /* A trainer from a JSON config file. */
  static Trainer* fromFile(const std::string& path) {
    keel_trainer* handle = NULL;
    keel_check(keel_trainer_create_from_file(path.c_str(), &handle));
    return new Trainer(handle);
  }
  ~Trainer() { keel_trainer_destroy(handle_); }

  /* One optimizer step (every micro-batch of the accumulation). */
  StepMetrics step() {
    keel_step_metrics m = keel_sized_metrics();
    keel_check(keel_trainer_step(handle_, &m));
    return keel_to_metrics(m);
  }
  /* `steps` optimizer steps; returns the last step's metrics. */
  StepMetrics train(int64_t steps) {
    keel_check(keel_trainer_train(handle_, steps, NULL, NULL));
    return lastMetrics();
  }
  /* As train(steps), calling `callback` after each step; it may stop training early. */
  StepMetrics train(int64_t steps, StepCallback* callback) {
    KeelTrainCallback state = {callback, std::exception_ptr()};
    keel_status status = keel_trainer_train(handle_, steps, callback ? keel_on_step : NULL, &state);
    if (state.error) std::rethrow_exception(state.error);
    keel_check(status);
    return lastMetrics();
  }
  /* The metrics of the last step (zeros before the first). */
  StepMetrics lastMetrics() {
    keel_step_metrics m = keel_sized_metrics();
    keel_check(keel_trainer_last_metrics(handle_, &m));
    return keel_to_metrics(m);
  }
  /* Mean validation loss over the configured number of validation batches. */
  float evaluate() {
    float loss = 0.0f;
    keel_check(keel_trainer_evaluate(handle_, &loss));
    return loss;
  }
  /* Saves a checkpoint under rootDir (rootDir/step-N, then rootDir/latest), keeping the newest `keep`. */
  void save(const std::string& rootDir, int32_t keep) { keel_check(keel_trainer_save(handle_, rootDir.c_str(), keep)); }
  /* Loads a checkpoint: a step folder, or a root whose `latest` names one. */
  void load(const std::string& checkpointPath) { keel_check(keel_trainer_load(handle_, checkpointPath.c_str())); }

  /* The parameters' names, in the model's order. */
  std::vector<std::string> paramNames() {
    std::vector<std::string> names;
    for (size_t i = 0, n = paramCount(); i < n; ++i) names.push_back(paramInfo(i).name);
    return names;
  }
  /* The global shape of parameter `name`, row-major (long long: SWIG types int64_t per platform). */
  std::vector<long long> paramShape(const std::string& name) {
    for (size_t i = 0, n = paramCount(); i < n; ++i) {
      keel_param_info info = paramInfo(i);
      if (name == info.name) return std::vector<long long>(info.shape, info.shape + info.ndim);
    }
    throw KeelError(KEEL_ERR_NOT_FOUND, "no parameter named \"" + name + "\"");
  }
  /* A copy of parameter `name`, flat, in row-major order. */
  std::vector<float> readParam(const std::string& name) {
    int64_t count = 1;
    std::vector<long long> shape = paramShape(name);
    for (size_t d = 0; d < shape.size(); ++d) count *= shape[d];
    std::vector<float> values((size_t)count);
    keel_check(keel_trainer_read_param(handle_, name.c_str(), values.data(), values.size()));
    return values;
  }
  /* Overwrites parameter `name` with `values` (flat, row-major, its element count). */
  void writeParam(const std::string& name, const std::vector<float>& values) {
    keel_check(keel_trainer_write_param(handle_, name.c_str(), values.data(), values.size()));
  }

  /* The model's true vocabulary size (without padding): token ids are in [0, vocabSize()). */
  int32_t vocabSize() {
    int32_t vocab = 0;
    keel_check(keel_trainer_vocab_size(handle_, &vocab));
    return vocab;
  }
  /* The longest row logits() takes: the run's data.seq_len. */
  int32_t contextLength() {
    int32_t seqLen = 0;
    keel_check(keel_trainer_context_length(handle_, &seqLen));
    return seqLen;
  }
  /* Logits of an inference forward of `tokens` ((batch, seqLen) row-major, 1 <= seqLen <=
     contextLength()), flat (batch, seqLen, vocabSize()) row-major. The shape is checked here
     because the output is allocated here and C cannot see the array's length; ids and the
     context length are checked by the core. */
  std::vector<float> logits(const std::vector<int32_t>& tokens, int32_t batch, int32_t seqLen) {
    if (batch < 1 || seqLen < 1 || tokens.size() != size_t(batch) * size_t(seqLen))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "logits: " + std::to_string(tokens.size()) + " token ids for batch " +
                                                     std::to_string(batch) + " and seqLen " + std::to_string(seqLen) +
                                                     "; expected batch >= 1, seqLen >= 1 and batch * seqLen ids");
    std::vector<float> values(tokens.size() * size_t(vocabSize()));
    keel_check(keel_trainer_logits(handle_, tokens.data(), batch, seqLen, values.data(), values.size()));
    return values;
  }
  /* `count` tokens generated after `prompt` (which may be empty), as `keel run` samples: softmax
     at `temperature` (0: in effect the argmax; negative: train.sample_temperature) seeded by
     all 64 bits of `seed` (int64_t so that Java gets a long, not a BigInteger): the same seed
     gives the same tokens. The prompt is not repeated in the result. */
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int32_t count, double temperature, int64_t seed) {
    std::vector<int32_t> tokens(count > 0 ? size_t(count) : 0);  // a negative count is refused by the core
    keel_check(keel_trainer_generate(handle_, prompt.data(), prompt.size(), count, temperature, uint64_t(seed),
                                     tokens.data()));
    return tokens;
  }

 private:
  explicit Trainer(keel_trainer* handle) : handle_(handle) {}
  Trainer(const Trainer&);
  Trainer& operator=(const Trainer&);
  size_t paramCount() {
    size_t count = 0;
    keel_check(keel_trainer_param_count(handle_, &count));
    return count;
  }
  keel_param_info paramInfo(size_t index) {
    keel_param_info info = {};
    info.struct_size = sizeof info;
    keel_check(keel_trainer_param_info(handle_, index, &info));
    return info;
  }
  keel_trainer* handle_;
};

/* Every plugin the loader found (searching its folders on the first call). */
std::vector<PluginDescription> plugins() {
  size_t count = 0;
  keel_check(keel_plugin_count(&count));
  std::vector<PluginDescription> found;
  for (size_t i = 0; i < count; ++i) {
    keel_plugin_description d = {};
    d.struct_size = sizeof d;
    keel_check(keel_plugin_describe(i, &d));
    PluginDescription p;
    p.kind = d.kind_name;
    p.name = d.info->name;
    p.version = d.info->version;
    p.abiMajor = (int)d.info->abi_major;
    p.abiMinor = (int)d.info->abi_minor;
    p.path = d.path;
    p.description = d.info->description ? d.info->description : "";
    found.push_back(p);
  }
  return found;
}

/* Adds one plugin library by path ahead of every search folder.

   keel_register_plugin and keel_register_plugin_replace (0.5) are not wrapped: they take a
   keel_plugin_info whose strings and table of C function pointers must stay valid for the rest
   of the process and are called from the core's threads. Here that would mean a director class
   per plugin kind with a C trampoline per slot, and every call on the training path crossing
   JNI. A plugin for a SWIG language is written in C or C++ as a library and added with
   registerPluginLibrary; added before the first plugins() call or trainer, it is searched
   first, so its plugins take the place of bundled ones of the same names. */
void registerPluginLibrary(const std::string& path) { keel_check(keel_register_plugin_library(path.c_str())); }
%}

#ifdef SWIGJAVA
%nojavaexception;
#else
%noexception;
#endif
