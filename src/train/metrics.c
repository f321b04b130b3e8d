#include "train/metrics.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

int metrics_open(metrics_sink *s, const char *log_path, long total_steps, int quiet) {
    memset(s, 0, sizeof *s);
    s->quiet = quiet;
    s->tty = isatty(fileno(stdout));
    s->print_every = total_steps >= 40 ? total_steps / 20 : 1;
    if (log_path) {
        s->log = fopen(log_path, "w");
        if (!s->log) return bg_error("%s: cannot open metrics log (%s)", log_path, strerror(errno));
    }
    return BG_OK;
}

static void format_duration(char *buf, size_t n, double sec) {
    if (!(sec >= 0) || sec > 1e7) {
        snprintf(buf, n, "--");
        return;
    }
    long s = (long)(sec + 0.5);
    if (s >= 3600) snprintf(buf, n, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else if (s >= 60) snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, n, "%lds", s);
}

static void json_number(FILE *f, const char *key, const char *fmt, double x) {
    fprintf(f, ",\"%s\":", key);
    if (isfinite(x)) fprintf(f, fmt, x);
    else fputs("null", f);
}

// One number per MoE layer: "key":[x0,x1,...]; the field at byte offset `off` of each
// layer's health (a double).
static void json_layers(FILE *f, const char *key, const routing_health *h, size_t off,
                        const char *fmt) {
    fprintf(f, ",\"%s\":[", key);
    for (int i = 0; i < h->n_layers; i++) {
        double x = *(const double *)((const char *)&h->layers[i] + off);
        if (i) fputc(',', f);
        if (isfinite(x)) fprintf(f, fmt, x);
        else fputs("null", f);
    }
    fputc(']', f);
}

static void json_routing_health(FILE *f, const routing_health *h) {
#define HEALTH_FIELD(key, member, fmt) \
    json_layers(f, key, h, offsetof(routing_layer_health, member), fmt)
    HEALTH_FIELD("load_min", stats.load_min, "%.0f");
    HEALTH_FIELD("load_max", stats.load_max, "%.0f");
    HEALTH_FIELD("load_cv", stats.load_cv, "%.4f");
    HEALTH_FIELD("max_over_mean", stats.max_over_mean, "%.4f");
    HEALTH_FIELD("drop_frac", stats.drop_frac, "%.6g");
    HEALTH_FIELD("router_entropy", stats.router_entropy, "%.4f");
    HEALTH_FIELD("leave_node_frac", leave_node_frac, "%.4f");
#undef HEALTH_FIELD
    fputs(",\"dead_experts\":[", f);
    for (int i = 0; i < h->n_layers; i++) fprintf(f, "%s%d", i ? "," : "", h->layers[i].dead_experts);
    fputc(']', f);
    // The bias gate's per-expert biases, one list per MoE layer (null where a layer has none).
    int any_bias = 0;
    for (int i = 0; i < h->n_layers; i++) any_bias |= h->layers[i].bias != NULL;
    if (!any_bias) return;
    fputs(",\"router_bias\":[", f);
    for (int i = 0; i < h->n_layers; i++) {
        const float *b = h->layers[i].bias;
        if (i) fputc(',', f);
        if (!b) {
            fputs("null", f);
            continue;
        }
        fputc('[', f);
        for (int e = 0; e < h->experts; e++) fprintf(f, "%s%.6g", e ? "," : "", b[e]);
        fputc(']', f);
    }
    fputc(']', f);
}

// " | max/mean 1.23 | drop 0.0% | dead 0": the worst layer's balance and drops, and the
// dead experts of all layers.
static void routing_summary(char *buf, size_t n, const routing_health *h) {
    if (!h || h->n_layers == 0) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, n, " | max/mean %.2f | drop %.1f%% | dead %d", h->worst_max_over_mean,
             100 * h->worst_drop_frac, h->dead_total);
}

#define MIB(x) ((double)(x) / (1024.0 * 1024.0))

void metrics_memory(metrics_sink *s, const memory_report *r, int ranks) {
    if (s->quiet || s->no_stdout) return;
    char who[64] = "";
    if (ranks > 1) snprintf(who, sizeof who, " (the largest over %d ranks)", ranks);
    printf("memory per rank%s, MiB: parameters %.1f, gradients %.1f, optimizer %.1f, "
           "activations %.1f, MoE exchange %.1f", who, MIB(r->params), MIB(r->grads),
           MIB(r->optimizer), MIB(r->activations), MIB(r->moe_exchange));
    if (r->moe_exchange_heap) printf(" + up to %.1f grown", MIB(r->moe_exchange_heap));
    printf(", workspaces %.1f, snapshot %.1f, communicators' scratch %.1f; total %.1f\n",
           MIB(r->workspaces), MIB(r->snapshot), MIB(r->comm_scratch), MIB(r->total));
    fflush(stdout);
}

// The report as one JSON object (bytes), on the first step's line.
static void json_memory(FILE *f, const memory_report *r) {
    fprintf(f, ",\"memory\":{\"params\":%zu,\"grads\":%zu,\"optimizer\":%zu,"
               "\"activations\":%zu,\"moe_exchange\":%zu,\"moe_exchange_heap_bound\":%zu,"
               "\"workspaces\":%zu,\"snapshot\":%zu,\"comm_scratch\":%zu,\"total\":%zu}",
            r->params, r->grads, r->optimizer, r->activations, r->moe_exchange,
            r->moe_exchange_heap, r->workspaces, r->snapshot, r->comm_scratch, r->total);
}

void metrics_step(metrics_sink *s, const step_metrics *m, const model *mdl) {
    if (s->quiet) return;
    if (s->log) {
        // JSON has no inf or nan: a diverged loss or an overflowed gradient is null.
        fprintf(s->log, "{\"step\":%ld", m->step);
        json_number(s->log, "loss", "%.6f", m->loss);
        json_number(s->log, "aux_loss", "%.6f", m->aux_loss);
        json_number(s->log, "z_loss", "%.6f", m->z_loss);
        json_number(s->log, "lr", "%.6g", m->lr);
        json_number(s->log, "grad_norm", "%.6f", m->grad_norm);
        fprintf(s->log, ",\"tokens_per_s\":%.1f,\"gflops\":%.2f,\"step_s\":%.6f", m->tokens_per_s,
                m->gflops, m->step_seconds);
        fprintf(s->log, ",\"peak_rss_mib\":%.1f", m->peak_rss_mib);
        // The exchange's high-water marks: communicator scratch (bytes) and expert rows.
        if (m->ranks > 1) fprintf(s->log, ",\"comm_scratch_hwm\":%.0f", m->comm_scratch_held);
        if (m->expert_rows_hwm) fprintf(s->log, ",\"expert_rows_hwm\":%ld", m->expert_rows_hwm);
        if (m->expert_rows_grown) fprintf(s->log, ",\"expert_rows_grown\":%ld", m->expert_rows_grown);
        if (m->memory) json_memory(s->log, m->memory);
        if (m->fp16) fprintf(s->log, ",\"loss_scale\":%.0f,\"skipped\":%s", m->loss_scale, m->skipped ? "true" : "false");
        else if (m->skip_reason) fputs(",\"skipped\":true", s->log);
        if (m->skip_reason) fprintf(s->log, ",\"skip_reason\":\"%s\",\"skips_total\":%ld", m->skip_reason, m->skips_total);
        if (m->rewound)
            fprintf(s->log, ",\"rewind\":{\"to_step\":%ld,\"skip_samples\":[%llu,%llu]}", m->rewind_to,
                    (unsigned long long)m->rewind_lo, (unsigned long long)m->rewind_hi);
        fputs(",\"expert_counts\":[", s->log);
        int first = 1;
        for (int l = 0; l < mdl->cfg.num_hidden_layers; l++) {
            const int *counts = model_expert_counts(mdl, l);
            if (!counts) continue;
            fprintf(s->log, "%s[", first ? "" : ",");
            for (int e = 0; e < mdl->cfg.num_local_experts; e++)
                fprintf(s->log, "%s%d", e ? "," : "", counts[e]);
            fputc(']', s->log);
            first = 0;
        }
        fputc(']', s->log);
        if (m->routing && m->routing->n_layers > 0) json_routing_health(s->log, m->routing);
        if (m->ranks > 1)
            fprintf(s->log,
                    ",\"ranks\":%d,\"a2a_bytes_intra\":%.0f,\"a2a_bytes_inter\":%.0f,"
                    "\"a2a_msgs_inter\":%.0f,\"a2a_s\":%.6f,\"a2a_exposed_s\":%.6f,"
                    "\"allreduce_bytes\":%.0f,\"allreduce_s\":%.6f,\"allreduce_exposed_s\":%.6f",
                    m->ranks, m->a2a_bytes_intra, m->a2a_bytes_inter, m->a2a_msgs_inter,
                    m->a2a_seconds, m->a2a_exposed_seconds, m->allreduce_bytes,
                    m->allreduce_seconds, m->allreduce_exposed_seconds);
        if (m->ranks > 1 && m->a2a_skew_seconds > 0)
            fprintf(s->log, ",\"a2a_skew_s\":%.6f", m->a2a_skew_seconds);
        if (m->extra_json) fprintf(s->log, ",%s", m->extra_json);
        fputs("}\n", s->log);
        fflush(s->log);
    }
    if (s->no_stdout) return;
    char eta[32], routing[96];
    format_duration(eta, sizeof eta, m->eta_seconds);
    routing_summary(routing, sizeof routing, m->routing);
    int digits = snprintf(NULL, 0, "%ld", m->total_steps);
    if (s->tty) {
        printf("\r\033[Kstep %*ld/%ld | loss %.4f | aux %.4f%s | %.0f tok/s | %.1f GFLOP/s | ETA %s",
               digits, m->step, m->total_steps, m->loss, m->aux_loss, routing, m->tokens_per_s,
               m->gflops, eta);
        s->line_open = 1;
        if (m->step == m->total_steps) {
            putchar('\n');
            s->line_open = 0;
        }
        fflush(stdout);
    } else if (m->step % s->print_every == 0 || m->step == 1 || m->step == m->total_steps) {
        printf("step %*ld/%ld | loss %.4f | aux %.4f%s | %.0f tok/s | %.1f GFLOP/s | ETA %s\n",
               digits, m->step, m->total_steps, m->loss, m->aux_loss, routing, m->tokens_per_s,
               m->gflops, eta);
        fflush(stdout);
    }
}

void metrics_log_line(metrics_sink *s, const char *json) {
    if (s->quiet || !s->log) return;
    fputs(json, s->log);
    fputc('\n', s->log);
    fflush(s->log);
}

void metrics_val(metrics_sink *s, long step, double loss) {
    if (s->quiet || !s->log) return;
    fprintf(s->log, "{\"val_step\":%ld", step);
    json_number(s->log, "val_loss", "%.6f", loss);
    fputs("}\n", s->log);
    fflush(s->log);
}

void metrics_note(metrics_sink *s, const char *fmt, ...) {
    if (s->quiet || s->no_stdout) return;
    if (s->line_open) {
        putchar('\n');
        s->line_open = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

void metrics_log_object(metrics_sink *s, const char *json) {
    if (s->quiet || !s->log) return;
    fprintf(s->log, "%s\n", json);
    fflush(s->log);
}

void metrics_close(metrics_sink *s) {
    if (s->line_open) putchar('\n');
    s->line_open = 0;
    if (s->log) fclose(s->log);
    s->log = NULL;
}
