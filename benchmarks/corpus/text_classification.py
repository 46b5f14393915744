"""Shape: TensorFlow's "text classification" (IMDB-like: TextVectorization, Embedding, GlobalAveragePooling1D).

Pattern: TextVectorization adapted on a tf.data of strings, mapped in the pipeline, Sequential fit.

The vectorize layer runs in ``dataset.map`` (a tf.data function) as the tutorial does; the model trains on
integer sequences; an export model (vectorize layer + model + sigmoid) predicts on raw strings. Data:
synthetic "reviews" from a small vocabulary, the label whether "good" words outnumber "bad" ones.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(4)
good, bad, neutral = ["great", "fine", "superb", "lovely"], ["awful", "boring", "weak", "dull"], \
    ["movie", "plot", "actor", "scene", "the", "a", "was", "and"]


def review():
    words = list(rng.choice(good + bad + neutral, size=12))
    return " ".join(words), int(sum(w in good for w in words) > sum(w in bad for w in words))


texts, labels = zip(*[review() for _ in range(192)])
raw_train_ds = tf.data.Dataset.from_tensor_slices((list(texts[:160]), list(labels[:160]))).batch(32)
raw_test_ds = tf.data.Dataset.from_tensor_slices((list(texts[160:]), list(labels[160:]))).batch(32)

max_features, sequence_length = 64, 12
vectorize_layer = tf.keras.layers.TextVectorization(max_tokens=max_features, output_mode="int",
                                                    output_sequence_length=sequence_length)
vectorize_layer.adapt(raw_train_ds.map(lambda x, y: x))


def vectorize_text(text, label):
    text = tf.expand_dims(text, -1)
    return vectorize_layer(text), label


train_ds = raw_train_ds.map(vectorize_text).cache().prefetch(tf.data.AUTOTUNE)
test_ds = raw_test_ds.map(vectorize_text)

model = tf.keras.Sequential([
    tf.keras.layers.Embedding(max_features, 8),
    tf.keras.layers.Dropout(0.2),
    tf.keras.layers.GlobalAveragePooling1D(),
    tf.keras.layers.Dropout(0.2),
    tf.keras.layers.Dense(1),
])
model.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=True), optimizer="adam",
              metrics=[tf.keras.metrics.BinaryAccuracy(threshold=0.0)])
history = model.fit(train_ds, validation_data=test_ds, epochs=3, verbose=0)
loss, accuracy = model.evaluate(test_ds, verbose=0)

export_model = tf.keras.Sequential([vectorize_layer, model, tf.keras.layers.Activation("sigmoid")])
export_model.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=False), optimizer="adam",
                     metrics=["accuracy"])
examples = tf.constant(["great great movie", "the plot was awful and dull", "a scene"])
scores = export_model.predict(examples, verbose=0)

print("RESULT " + json.dumps({"history": history.history, "test": [loss, accuracy], "scores": scores.tolist()}))
