// The metrics line's hook for the `bias` gate: a layer whose routing health points at
// per-expert biases gets them logged ("router_bias", one list per MoE layer, null for
// a layer without); with no bias anywhere the field is absent.
#include "core/error.h"
#include "test_util.h"
#include "train/metrics.h"
#include "train/routing_health.h"
#include "train_fixture.h"

#include <stdio.h>
#include <string.h>

static void log_one_step(train_fixture *f, const float *bias0, char *line, size_t n) {
    train_options o;
    fixture_options(&o, f);
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "init: %s", bg_last_error());
    routing_health h;
    TU_CHECK(routing_health_init(&h, &tr.m, NULL, 10, 0) == BG_OK, "health");
    fixture_step(&tr);
    routing_health_update(&h, &tr.m, NULL, tr.step);
    h.layers[0].bias = bias0;
    char path[400];
    snprintf(path, sizeof path, "%s/m.jsonl", f->dir);
    metrics_sink sink;
    TU_CHECK(metrics_open(&sink, path, 1, 0) == BG_OK, "open");
    sink.tty = 0;
    step_metrics sm = {.step = 1, .total_steps = 1, .routing = &h};
    metrics_step(&sink, &sm, &tr.m);
    metrics_close(&sink);
    FILE *in = fopen(path, "r");
    line[0] = '\0';
    TU_CHECK(in && fgets(line, (int)n, in), "read %s", path);
    if (in) fclose(in);
    remove(path);
    routing_health_free(&h);
    trainer_free(&tr);
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    static char line[8192];
    const float bias[4] = {0.5f, -0.25f, 0.0f, 1.0f};  // the fixture: 4 experts, 2 MoE layers
    log_one_step(&f, bias, line, sizeof line);
    TU_CHECK(strstr(line, ",\"router_bias\":[[0.5,-0.25,0,1],null]"), "bias not logged: %s", line);
    TU_CHECK(strstr(line, "\"dead_experts\":[") && strstr(line, "\"leave_node_frac\":[0.0000,0.0000]"),
             "health fields missing: %s", line);
    log_one_step(&f, NULL, line, sizeof line);
    TU_CHECK(!strstr(line, "router_bias"), "router_bias without a bias: %s", line);
    fixture_remove(&f);
    return tu_finish("test_routing_bias_log");
}
