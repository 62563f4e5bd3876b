/* The KEEL_*_SIZE(m) macros against the sizes each release's own headers gave (sizeof, measured
   in the frozen copies of 0.4 .. 0.18 that the tree kept until 0.19; git history keeps them):
   the compatibility plugins pass these sizes as an old binary does, so a wrong
   branch in a macro would test the wrong prefix. Today's open minor gives today's sizeof. */
#include <keel/keel.h>

#include <stdio.h>

typedef struct released {
  int minor;
  size_t strategy_api, strategy_info, optimizer_api, optimizer_info, step_args, param_spec;
} released;

static const released kReleased[] = {
    {4, 128, 40, 48, 24, 72, 120},   {5, 160, 40, 48, 24, 72, 120},   {6, 160, 40, 48, 24, 72, 152},
    {7, 160, 40, 48, 24, 72, 152},   {8, 160, 40, 48, 24, 88, 152},   {9, 160, 40, 48, 24, 88, 152},
    {10, 160, 40, 48, 24, 88, 152},  {11, 168, 40, 48, 24, 88, 152},  {12, 168, 40, 72, 24, 128, 152},
    {13, 168, 40, 72, 24, 128, 152}, {14, 184, 40, 72, 24, 128, 152}, {15, 184, 40, 72, 24, 128, 152},
    {16, 184, 40, 72, 24, 128, 152}, {17, 184, 40, 72, 24, 128, 152}, {18, 184, 40, 72, 24, 128, 152},
};

static int failures = 0;

static void expect(int minor, const char* what, size_t macro, size_t released_size) {
  if (macro == released_size) return;
  fprintf(stderr, "FAIL: %s for ABI 0.%d is %zu, its release's sizeof was %zu\n", what, minor, macro, released_size);
  ++failures;
}

int main(void) {
  for (size_t i = 0; i < sizeof kReleased / sizeof kReleased[0]; ++i) {
    const released* r = &kReleased[i];
    expect(r->minor, "KEEL_STRATEGY_API_SIZE", KEEL_STRATEGY_API_SIZE(r->minor), r->strategy_api);
    expect(r->minor, "KEEL_STRATEGY_INFO_SIZE", KEEL_STRATEGY_INFO_SIZE(r->minor), r->strategy_info);
    expect(r->minor, "KEEL_OPTIMIZER_API_SIZE", KEEL_OPTIMIZER_API_SIZE(r->minor), r->optimizer_api);
    expect(r->minor, "KEEL_OPTIMIZER_INFO_SIZE", KEEL_OPTIMIZER_INFO_SIZE(r->minor), r->optimizer_info);
    expect(r->minor, "KEEL_OPTIMIZER_STEP_ARGS_SIZE", KEEL_OPTIMIZER_STEP_ARGS_SIZE(r->minor), r->step_args);
    expect(r->minor, "KEEL_PARAM_SPEC_SIZE", KEEL_PARAM_SPEC_SIZE(r->minor), r->param_spec);
  }
  const int open = KEEL_ABI_VERSION_MINOR;
  expect(open, "KEEL_STRATEGY_API_SIZE", KEEL_STRATEGY_API_SIZE(open), sizeof(keel_strategy_api));
  expect(open, "KEEL_STRATEGY_INFO_SIZE", KEEL_STRATEGY_INFO_SIZE(open), sizeof(keel_strategy_info));
  expect(open, "KEEL_OPTIMIZER_API_SIZE", KEEL_OPTIMIZER_API_SIZE(open), sizeof(keel_optimizer_api));
  expect(open, "KEEL_OPTIMIZER_INFO_SIZE", KEEL_OPTIMIZER_INFO_SIZE(open), sizeof(keel_optimizer_info));
  expect(open, "KEEL_OPTIMIZER_STEP_ARGS_SIZE", KEEL_OPTIMIZER_STEP_ARGS_SIZE(open), sizeof(keel_optimizer_step_args));
  expect(open, "KEEL_PARAM_SPEC_SIZE", KEEL_PARAM_SPEC_SIZE(open), sizeof(keel_param_spec));
  if (failures) return 1;
  printf("PASS: 6 struct sizes for ABI 0.4 .. 0.18 and the open 0.%d\n", open);
  return 0;
}
