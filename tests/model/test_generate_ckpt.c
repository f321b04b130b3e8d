// Loading a checkpoint for inference (train/checkpoint_weights.h).
//
// A trainer runs 3 steps and saves; its 4th step's loss is the loss of the saved
// parameters on batch 4 (the forward runs before the update). A model loaded with
// ckpt_load_weights, from the step directory and from the save directory (`latest`),
// must hold the same parameters bit for bit and give that same loss on that batch:
// the same kernels on the same values with the same thread count, so the tolerance is
// none. Then the errors: a missing path, a directory that is not a checkpoint, a flipped
// byte in the model file (checksum), a missing model file, each BG_ERR with one
// line naming the problem; and a missing optimizer file is fine (inference needs
// only the model).
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "test_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_weights.h"
#include "train/train_fixture.h"

static void expect_error(const char *path, const char *pattern) {
    model m;
    memset(&m, 0, sizeof m);
    int rc = ckpt_load_weights(&m, path, NULL);
    TU_CHECK(rc == BG_ERR, "%s: loaded, expected an error about '%s'", path, pattern);
    if (rc == BG_ERR) {
        TU_CHECK(strstr(bg_last_error(), pattern) != NULL, "%s: error '%s' does not mention '%s'", path,
                 bg_last_error(), pattern);
        TU_CHECK(strchr(bg_last_error(), '\n') == NULL, "%s: error is more than one line", path);
        printf("error as expected: %s\n", bg_last_error());
    } else {
        model_free(&m);
    }
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    BG_ASSERT(a && b);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) BG_ASSERT(fwrite(buf, 1, n, b) == n);
    fclose(a);
    fclose(b);
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    char save[400], step_dir[500], path[600], bad[600];
    snprintf(save, sizeof save, "%s/ckpt", f.dir);
    snprintf(step_dir, sizeof step_dir, "%s/step_00000003", save);

    train_options o;
    fixture_options(&o, &f);
    o.steps = 10;
    o.batch_size = 4;
    o.seq_len = 16;
    o.threads = 2;
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    for (int i = 0; i < 3; i++) fixture_step(&tr);
    BG_ASSERT(ckpt_save(&tr, save) == BG_OK);
    size_t numel = tr.m.table.numel;
    float *saved = bg_malloc(numel * sizeof(float));
    memcpy(saved, tr.m.params, numel * sizeof(float));
    double train_loss = fixture_step(&tr);  // batch 4, on the saved parameters

    const char *sources[2] = {step_dir, save};
    for (int s = 0; s < 2; s++) {
        model m;
        ckpt_weights_info info;
        int rc = ckpt_load_weights(&m, sources[s], &info);
        TU_CHECK(rc == BG_OK, "load %s: %s", sources[s], bg_last_error());
        if (rc != BG_OK) continue;
        TU_CHECK(info.step == 3 && info.batch_size == 4 && info.seq_len == 16,
                 "info: step %ld, batch %d x %d", info.step, info.batch_size, info.seq_len);
        TU_CHECK(strcmp(info.dir, step_dir) == 0, "resolved %s, want %s", info.dir, step_dir);
        TU_CHECK(memcmp(&m.cfg, &tr.cfg, sizeof m.cfg) == 0, "%s: config differs", sources[s]);
        TU_CHECK(m.table.numel == numel && memcmp(m.params, saved, numel * sizeof(float)) == 0,
                 "%s: parameters differ from the saved ones", sources[s]);
        model_prepare(&m, 4, 16);
        model_forward(&m, tr.inputs, tr.targets);
        TU_CHECK(m.loss == train_loss, "%s: loss %.9f, training step's loss %.9f", sources[s], m.loss,
                 train_loss);
        printf("loaded %s (step %ld): loss on batch 4 %.6f, training's %.6f\n", sources[s], info.step,
               m.loss, train_loss);
        model_free(&m);
    }

    expect_error("/nonexistent/bagualu_ckpt", "cannot open checkpoint");
    expect_error(f.dir, "not a checkpoint");
    // Without the optimizer state: still loads.
    snprintf(path, sizeof path, "%s/optimizer-00001-of-00001.safetensors", step_dir);
    snprintf(bad, sizeof bad, "%s/optimizer.moved", step_dir);
    BG_ASSERT(rename(path, bad) == 0);
    model m;
    TU_CHECK(ckpt_load_weights(&m, step_dir, NULL) == BG_OK, "without optimizer state: %s", bg_last_error());
    model_free(&m);
    // A flipped byte in the middle of the tensor data.
    snprintf(path, sizeof path, "%s/model-00001-of-00001.safetensors", step_dir);
    snprintf(bad, sizeof bad, "%s/model.orig", step_dir);
    copy_file(path, bad);
    FILE *fp = fopen(path, "r+b");
    BG_ASSERT(fp);
    struct stat st;
    BG_ASSERT(stat(path, &st) == 0);
    fseek(fp, st.st_size / 2, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, st.st_size / 2, SEEK_SET);
    fputc(c ^ 0x10, fp);
    fclose(fp);
    expect_error(step_dir, "checksum mismatch");
    remove(path);
    expect_error(save, "missing");

    // Clean up (the directory tree the fixture and the save made).
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f.dir);
    BG_ASSERT(system(cmd) == 0);
    free(saved);
    trainer_free(&tr);
    return tu_finish("test_generate_ckpt");
}
